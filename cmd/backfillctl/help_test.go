package main

import (
	"context"
	"flag"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// --help (and -h) on every command, and on every noun (backfillctl backfills --help), is an
// answer, exit code 0, never "unknown command".
func TestHelpOnEveryCommandAndNounExitsZero(t *testing.T) {
	for _, cmd := range commands {
		for _, h := range []string{"--help", "-h"} {
			code, _, stderr := invoke(t, "", nil, append(strings.Fields(cmd.name), h)...)
			require.Equal(t, exitOK, code, "%s %s: %s", cmd.name, h, stderr)
			require.NotContains(t, stderr, "unknown command", cmd.name)
		}
	}
	for _, n := range nounNames() {
		for _, h := range []string{"--help", "-h", "help"} {
			code, stdout, stderr := invoke(t, "", nil, n, h)
			require.Equal(t, exitOK, code, "%s %s: %s", n, h, stderr)
			require.Contains(t, stdout, "Usage of backfillctl "+n)
		}
	}
	code, stdout, _ := invoke(t, "", nil, "help")
	require.Equal(t, exitOK, code)
	require.Contains(t, stdout, "Exit codes:")
}

// The usage names every flag of every command: a flag added to a command and not to the
// usage fails here.
func TestUsageListsEveryFlag(t *testing.T) {
	for _, cmd := range commands {
		c := &cli{g: defaultGlobals(func(string) string { return "" }), stdout: io.Discard, stderr: io.Discard, getenv: func(string) string { return "" }}
		fs := newFlagSet(cmd.name, cmd.name, &c.g, io.Discard)
		_ = cmd.run(context.Background(), c, fs, []string{"-h"})
		text := commandUsage(cmd.name)
		require.NotEmpty(t, text, "%s is in the usage", cmd.name)
		if strings.Contains(text, "same flags as create") {
			text += commandUsage("backfills create")
		}
		var missing []string
		fs.VisitAll(func(f *flag.Flag) {
			if len(f.Name) > 1 && !strings.Contains(text, "--"+f.Name) && !globalFlag(f.Name) {
				missing = append(missing, "--"+f.Name)
			}
		})
		assert.Empty(t, missing, "%s: flags the usage does not name", cmd.name)
	}
}

// A typo in a command or a flag is answered with the nearest name.
func TestUnknownCommandsAndFlagsSuggestTheNearest(t *testing.T) {
	for typed, want := range map[string]string{
		"backfils create": "did you mean 'backfills create'?",
		"backfills creat": "did you mean 'backfills create'?",
		"wath 1":          "did you mean 'watch'?",
		"exector":         "did you mean 'executor'?",
		"dags lst":        "did you mean 'dags list'?",
	} {
		code, _, stderr := invoke(t, "", nil, strings.Fields(typed)...)
		require.Equal(t, exitError, code, typed)
		require.Contains(t, stderr, want, typed)
	}
	code, _, stderr := invoke(t, "", nil, "zzzz")
	require.Equal(t, exitError, code)
	require.NotContains(t, stderr, "did you mean", "nothing is near zzzz")

	code, _, stderr = invoke(t, "", nil, "backfills", "list", "--limt", "5")
	require.Equal(t, exitError, code)
	require.Contains(t, stderr, "flag provided but not defined: --limt; did you mean --limit?")
	require.Equal(t, 2, levenshtein("kitten", "sitten")+levenshtein("", "ab")-1)
}

// commandUsage is the usage's entry (or entries) for one command: its line and the lines
// indented under it.
func commandUsage(name string) string {
	var b strings.Builder
	in := false
	for _, line := range strings.Split(usage, "\n") {
		switch {
		case strings.HasPrefix(line, "  "+name+" ") || line == "  "+name:
			in = true
		case in && strings.HasPrefix(line, "   "):
		default:
			in = false
		}
		if in {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

func globalFlag(name string) bool { return name == "server" || name == "token" || name == "output" }
