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
// passes, the whole group gets SIGTERM, then SIGKILL after the grace period, and so does
// every process tagged with the run's scope (procscope.go): a child that left the group with
// setsid is stopped with it. Those still alive when the program exits on its own are stopped
// the same way: a run's processes never outlive its report.
//
// It answers nil for exit 0; context.Cause(ctx) when ctx ended; a *programError otherwise.
func (p programRun) run(ctx context.Context) error {
	tl := &tail{}
	cmd := exec.Command(p.path, p.args...)
	cmd.Env = append(append(os.Environ(), p.env...), scopeVar+"="+p.scope)
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
		stopRun(pgid, p.scope, p.grace)
	case <-ctx.Done():
		stopped = context.Cause(ctx)
		stopRun(pgid, p.scope, p.grace)
		waitErr = <-done
	case <-timeout:
		stopped = &programError{what: fmt.Sprintf("timed out after %s", p.timeout)}
		stopRun(pgid, p.scope, p.grace)
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
	exitCode := -1
	var ee *exec.ExitError
	if errors.As(waitErr, &ee) {
		exitCode = ee.ExitCode() // -1 when a signal ended it
	}
	return &programError{what: describeExit(waitErr), stderr: tl.String(), exitCode: exitCode}
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

// stopRun sends SIGTERM to every process of the group and every process tagged with the
// run's scope, waits up to grace for all of them to be gone, and then sends SIGKILL to those
// left. A tagged process that appears meanwhile (one forked during the grace) gets its SIGTERM
// too, and tagged processes are killed until none is found, since one may fork between a scan
// and its kill. A run with nothing left costs one kill(2) and one scan.
func stopRun(pgid int, scope string, grace time.Duration) {
	tagged := scopePIDs(scope)
	if !groupAlive(pgid) && len(tagged) == 0 {
		return
	}
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	termed := map[int]bool{}
	term := func(pids []int) {
		for _, pid := range pids {
			if termed[pid] {
				continue
			}
			termed[pid] = true
			// A member of the group had the group's SIGTERM; a second one would run its
			// handler twice.
			if g, err := syscall.Getpgid(pid); err == nil && g != pgid {
				_ = syscall.Kill(pid, syscall.SIGTERM)
			}
		}
	}
	term(tagged)
	deadline := time.Now().Add(grace)
	for i := 1; time.Now().Before(deadline); i++ {
		time.Sleep(groupPoll)
		groupLeft := groupAlive(pgid)
		// Reading every process's environment is dearer than one kill(2): while the group
		// still runs, the scan is only needed now and then, to send new processes SIGTERM.
		if groupLeft && i%scanEvery != 0 {
			continue
		}
		tagged = scopePIDs(scope)
		if !groupLeft && len(tagged) == 0 {
			return
		}
		term(tagged)
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	for range killRounds {
		tagged = scopePIDs(scope)
		if len(tagged) == 0 {
			return
		}
		for _, pid := range tagged {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(groupPoll)
	}
}

// scanEvery is how many group polls pass between two scans for the run's tagged processes
// while its group still runs; killRounds bounds the SIGKILL rounds for tagged processes.
const (
	scanEvery  = 5
	killRounds = 50
)

// groupAlive reports whether any process of the group still exists. A member that has
// exited but is not yet reaped (a zombie) still counts; the program itself is reaped by
// Wait, orphans by init.
func groupAlive(pgid int) bool {
	return syscall.Kill(-pgid, 0) == nil
}
