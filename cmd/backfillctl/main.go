// Command backfillctl is the command-line client of the backfill service, built on the Go
// SDK (package client): DAGs, backfills, a live progress view, and a demo executor.
//
//	backfillctl dags put sales --schedule '0 2 * * *' --timezone America/New_York
//	backfillctl backfills create --dag-id sales --from-date 2024-03-01 --to-date 2024-03-31 --wait
//
// Exit codes: 0 success (a watched backfill succeeded), 1 a watched backfill failed, 2 it
// was canceled, 3 any other error (the service's problem code and detail go to stderr),
// 4 a watched backfill paused (without --wait-through-pause), 130 interrupted while watching. `backfillctl help` prints the full usage.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/backfillsvc/backfill/client"
)

// Exit codes; usage documents them.
const (
	exitOK          = 0
	exitFailed      = 1
	exitCanceled    = 2
	exitError       = 3
	exitPaused      = 4
	exitInterrupted = 130
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// cli is one invocation: its global flags, streams and environment.
type cli struct {
	g      globals
	stdout io.Writer
	stderr io.Writer
	getenv func(string) string
}

// run is the whole program; it answers the exit code.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	c := &cli{g: defaultGlobals(getenv), stdout: stdout, stderr: stderr, getenv: getenv}
	root := flag.NewFlagSet("backfillctl", flag.ContinueOnError)
	root.SetOutput(stderr)
	c.g.register(root)
	root.Usage = func() { fmt.Fprint(stderr, usage) }
	if err := parseQuietly(root, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		fmt.Fprintf(stderr, "backfillctl: %v\nRun 'backfillctl help' for usage.\n", err)
		return exitError
	}
	args = root.Args()
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitError
	}
	if args[0] == "help" {
		fmt.Fprint(stdout, usage)
		return exitOK
	}
	cmd, rest, ok := lookup(args)
	if !ok {
		// A noun alone (backfillctl backfills) asks what it can do: its part of the usage;
		// asked with --help (or -h, or help), that is the answer, not a mistake.
		if text := nounUsage(args[0]); text != "" {
			if len(args) > 1 && isHelp(args[1]) {
				fmt.Fprint(stdout, text)
				return exitOK
			}
			if len(args) > 1 {
				fmt.Fprintf(stderr, "backfillctl: unknown command %q%s; the %s commands are:\n", joinWords(args, 2), parenthesized(suggestCommand(args)), args[0])
			}
			fmt.Fprint(stderr, text)
			return exitError
		}
		fmt.Fprintf(stderr, "backfillctl: unknown command %q%s\nRun 'backfillctl help' for usage.\n", joinWords(args, 2), suffix(suggestCommand(args)))
		return exitError
	}
	fs := newFlagSet(cmd.name, strings.TrimSpace(cmd.name+" "+cmd.synopsis), &c.g, c.stderr)
	return c.exitCode(ctx, cmd.name, cmd.run(ctx, c, fs, rest))
}

// isHelp reports whether arg asks for help.
func isHelp(arg string) bool {
	switch arg {
	case "-h", "-help", "--help", "help":
		return true
	}
	return false
}

// parenthesized is " (s)", or "" for no s.
func parenthesized(s string) string {
	if s == "" {
		return ""
	}
	return " (" + s + ")"
}

func suffix(s string) string {
	if s == "" {
		return ""
	}
	return "; " + s
}

// lookup finds the command named by the first one or two words of args.
func lookup(args []string) (command, []string, bool) {
	for _, cmd := range commands {
		if len(args) >= 1 && cmd.name == args[0] {
			return cmd, args[1:], true
		}
		if len(args) >= 2 && cmd.name == args[0]+" "+args[1] {
			return cmd, args[2:], true
		}
	}
	return command{}, nil, false
}

func joinWords(args []string, n int) string {
	s := ""
	for i, a := range args[:min(n, len(args))] {
		if i > 0 {
			s += " "
		}
		s += a
	}
	return s
}

// stateExit ends a command that watched a backfill to a failed or canceled end; the
// summary is already printed.
type stateExit struct{ state client.BackfillState }

func (e *stateExit) Error() string { return "backfill " + string(e.state) }

// exitCode prints err, if any, and maps it to the exit code.
func (c *cli) exitCode(ctx context.Context, name string, err error) int {
	var (
		se    *stateExit
		pe    *pauseExit
		usage *usageError
		prob  *client.ProblemError
	)
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.As(err, &pe):
		return exitPaused
	case errors.As(err, &se):
		if se.state == client.BackfillStateFailed {
			return exitFailed
		}
		return exitCanceled
	case errors.As(err, &usage):
		fmt.Fprintf(c.stderr, "backfillctl %s: %s\nRun 'backfillctl %s -h' for usage.\n", name, usage.msg, name)
	case errors.As(err, &prob):
		fmt.Fprintf(c.stderr, "backfillctl %s: error: %s\n", name, describeProblem(prob))
	case ctx.Err() != nil && errors.Is(err, context.Canceled):
		fmt.Fprintf(c.stderr, "backfillctl %s: interrupted: %v\n", name, err)
		return exitInterrupted
	case errors.Is(err, syscall.ECONNREFUSED):
		fmt.Fprintf(c.stderr, "backfillctl %s: error: %v\nhint: is the service running at %s? set --server or BACKFILL_SERVER\n", name, err, c.g.server)
	default:
		fmt.Fprintf(c.stderr, "backfillctl %s: error: %v\n", name, err)
	}
	return exitError
}

// nounUsage is the part of the usage about one noun's commands (backfills, dags, ...): each
// line that starts with the noun, with the lines indented under it. Empty for no such noun.
func nounUsage(noun string) string {
	known := false
	for _, cmd := range commands {
		known = known || strings.HasPrefix(cmd.name, noun+" ")
	}
	if !known {
		return ""
	}
	var b strings.Builder
	in := false
	for _, line := range strings.Split(usage, "\n") {
		switch {
		case strings.HasPrefix(line, "  "+noun+" "):
			in = true
		case in && strings.HasPrefix(line, "   "):
		default:
			in = false
		}
		if in {
			b.WriteString(line + "\n")
		}
	}
	return "Usage of backfillctl " + noun + ":\n" + b.String() + "\nRun 'backfillctl " + noun + " <command> -h' for a command's flags.\n"
}

// describeProblem is a problem's code and detail as a person reads them.
func describeProblem(p *client.ProblemError) string {
	s := p.Error()
	if p.Code == client.ProblemCodeBackfillAlreadyRunning && p.ActiveBackfillID != nil {
		s += fmt.Sprintf("\nhint: watch it with 'backfillctl watch %d' or cancel it with 'backfillctl backfills cancel %d'",
			*p.ActiveBackfillID, *p.ActiveBackfillID)
	}
	if p.Code == client.ProblemCodeUnauthorized {
		s += "\nhint: pass --token or set BACKFILL_TOKEN"
	}
	return s
}

// client builds the SDK client for the global flags.
func (c *cli) client() (*client.Client, error) {
	if err := c.g.validate(); err != nil {
		return nil, err
	}
	return client.New(c.g.server, c.g.token, client.WithRequestEditorFn(func(_ context.Context, req *http.Request) error {
		req.Header.Set("User-Agent", "backfillctl")
		return nil
	}))
}
