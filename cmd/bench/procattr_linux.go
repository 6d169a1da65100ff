package main

import "syscall"

// childProcAttr makes the kernel send SIGTERM to the service if this process dies first, so
// that a killed benchmark does not leave a server behind.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}
