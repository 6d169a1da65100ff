package main

import (
	"fmt"
	"os"
	"strings"
)

// maxArgStrlen is Linux's MAX_ARG_STRLEN: the longest single argument or "NAME=value"
// environment string execve takes, counting its terminating NUL. A longer one fails the
// whole exec with E2BIG ("argument list too long"), whatever the total size.
const maxArgStrlen = 131072

// confFits reports whether BACKFILL_CONF=<conf> fits in one environment string.
func (v runValues) confFits() bool {
	return len("BACKFILL_CONF=")+len(v.Conf)+1 <= maxArgStrlen
}

// runEnv is the run's part of the program's environment. A conf too big for one environment
// string is written to a private file (mode 0600, in the temporary directory) named by
// BACKFILL_CONF_FILE, and BACKFILL_CONF is then absent rather than cut: a program that finds
// neither has no conf to read. cleanup removes the file; call it once the program is gone.
func (v runValues) runEnv() (env []string, cleanup func(), err error) {
	env = v.env()
	if v.confFits() {
		return env, func() {}, nil
	}
	f, err := os.CreateTemp("", "backfill-conf-*.json") // created 0600
	if err != nil {
		return nil, nil, fmt.Errorf("the run's conf (%d bytes) is too big for the environment, and its file could not be written: %w", len(v.Conf), err)
	}
	cleanup = func() { _ = os.Remove(f.Name()) }
	if _, err := f.WriteString(v.Conf); err != nil {
		_ = f.Close()
		cleanup()
		return nil, nil, fmt.Errorf("writing the run's conf file: %w", err)
	}
	if err := f.Close(); err != nil {
		cleanup()
		return nil, nil, fmt.Errorf("writing the run's conf file: %w", err)
	}
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, "BACKFILL_CONF=") {
			out = append(out, kv)
		}
	}
	return append(out, "BACKFILL_CONF_FILE="+f.Name()), cleanup, nil
}

// expandArgs fills the run's values into the program's arguments. An argument that would be
// too long for exec (a big conf in {{ conf }}) fails the run with a note that says where the
// conf can be read instead, rather than with the kernel's "argument list too long".
func (v runValues) expandArgs(args []string) ([]string, error) {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = v.expand(a)
		if len(out[i])+1 > maxArgStrlen {
			return nil, &programError{what: fmt.Sprintf(
				"argument %d is %d bytes once filled in, over the %d bytes Linux allows in one argument: "+
					"the run's conf (%d bytes) is too big for {{ conf }}; read it from the file named by BACKFILL_CONF_FILE instead",
				i+1, len(out[i]), maxArgStrlen-1, len(v.Conf))}
		}
	}
	return out, nil
}
