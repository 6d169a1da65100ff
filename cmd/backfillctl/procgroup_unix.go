//go:build unix

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// groupPoll is how often a stopping group is checked for members left.
const groupPoll = 20 * time.Millisecond

// run starts the program directly (no shell unless the program is one) as the leader of a
// new process group, so that everything it starts can be stopped with it, and waits for it.
// When ctx ends (the backfill is being canceled, or the executor is stopping) or the timeout
// passes, the whole group gets SIGTERM, then SIGKILL after the grace period. Members of the
// group still alive when the program exits on its own are stopped the same way: a run's
// processes never outlive its report.
//
// It answers nil for exit 0; context.Cause(ctx) when ctx ended; a *programError otherwise.
func (p programRun) run(ctx context.Context) error {
	tl := &tail{}
	cmd := exec.Command(p.path, p.args...)
	cmd.Env = append(os.Environ(), p.env...)
	cmd.Stdout = p.stdout
	cmd.Stderr = io.MultiWriter(p.stderr, tl)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// A process the program left behind may hold its stdout or stderr open; Wait then waits
	// for it at most this long after the program exited before closing the pipes.
	cmd.WaitDelay = 200 * time.Millisecond
	if err := cmd.Start(); err != nil {
		return &programError{what: fmt.Sprintf("could not start: %v", err)}
	}
	pgid := cmd.Process.Pid
	if p.started != nil {
		p.started(pgid)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()

	var timeout <-chan time.Time
	if p.timeout > 0 {
		t := time.NewTimer(p.timeout)
		defer t.Stop()
		timeout = t.C
	}
	var (
		waitErr error
		stopped error // why the group was stopped, if it was
	)
	select {
	case waitErr = <-done:
		stopGroup(pgid, p.grace)
	case <-ctx.Done():
		stopped = context.Cause(ctx)
		stopGroup(pgid, p.grace)
		waitErr = <-done
	case <-timeout:
		stopped = &programError{what: fmt.Sprintf("timed out after %s", p.timeout)}
		stopGroup(pgid, p.grace)
		waitErr = <-done
	}
	var pe *programError
	switch {
	case errors.As(stopped, &pe):
		pe.stderr = tl.String()
		return pe
	case stopped != nil:
		return stopped
	case waitErr == nil || errors.Is(waitErr, exec.ErrWaitDelay):
		return nil
	}
	return &programError{what: describeExit(waitErr), stderr: tl.String()}
}

// describeExit says how a program ended: its exit status or the signal that killed it.
func describeExit(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return fmt.Sprintf("killed by signal %d (%s)", ws.Signal(), ws.Signal())
		}
		return fmt.Sprintf("exit status %d", ee.ExitCode())
	}
	return err.Error()
}

// stopGroup sends SIGTERM to every process of the group, waits up to grace for all of them to
// be gone, and then sends SIGKILL to those left. A group already empty costs one kill(2).
func stopGroup(pgid int, grace time.Duration) {
	if !groupAlive(pgid) {
		return
	}
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) {
		time.Sleep(groupPoll)
		if !groupAlive(pgid) {
			return
		}
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
}

// groupAlive reports whether any process of the group still exists. A member that has
// exited but is not yet reaped (a zombie) still counts; the program itself is reaped by
// Wait, orphans by init.
func groupAlive(pgid int) bool {
	return syscall.Kill(-pgid, 0) == nil
}
