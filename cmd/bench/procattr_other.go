//go:build !linux

package main

import "syscall"

// childProcAttr has nothing to add off Linux: Pdeathsig is Linux-only.
func childProcAttr() *syscall.SysProcAttr { return nil }
