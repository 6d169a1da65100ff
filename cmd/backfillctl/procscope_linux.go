//go:build linux

package main

import (
	"bytes"
	"os"
	"strconv"
)

// scopePIDs lists the live processes whose environment holds BACKFILL_RUN_SCOPE=token: the
// run's program and whatever it started, in its process group or out of it (a child that
// called setsid, a daemon that double-forked), as long as they kept the variable. A process
// of another user, whose environment cannot be read, cannot be signaled either; a zombie's
// reads empty, and it runs nothing.
func scopePIDs(token string) []int {
	dir, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	defer dir.Close()
	names, err := dir.Readdirnames(-1)
	if err != nil {
		return nil
	}
	needle := []byte("\x00" + scopeVar + "=" + token + "\x00")
	self := os.Getpid()
	var out []int
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil || pid == self {
			continue
		}
		env, err := os.ReadFile("/proc/" + name + "/environ")
		if err != nil || len(env) == 0 {
			continue
		}
		// Each entry ends in NUL; a leading one lets the first entry match too.
		if bytes.Contains(append([]byte{0}, env...), needle) {
			out = append(out, pid)
		}
	}
	return out
}
