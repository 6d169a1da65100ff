//go:build !unix

package main

import (
	"context"
	"errors"
	"io"
	"time"
)

// programRun is one start of the program for one run (see procgroup_unix.go).
type programRun struct {
	path    string
	args    []string
	env     []string
	stdout  io.Writer
	stderr  io.Writer
	timeout time.Duration
	grace   time.Duration
	started func(pid int)
}

// run is not available here: stopping a program with everything it started needs process
// groups.
func (p programRun) run(ctx context.Context) error {
	return errors.New("executor -- <program> needs a Unix system (process groups)")
}
