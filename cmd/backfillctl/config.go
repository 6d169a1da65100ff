package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/backfillsvc/backfill/client"
)

// globals are the flags every command takes, before or after the command's name.
type globals struct {
	server string
	token  string
	output string
}

// defaultGlobals reads the environment defaults of the global flags.
func defaultGlobals(getenv func(string) string) globals {
	g := globals{server: "http://localhost:8080", token: getenv("BACKFILL_TOKEN"), output: "table"}
	if s := getenv("BACKFILL_SERVER"); s != "" {
		g.server = s
	}
	return g
}

// register adds the global flags to fs; their defaults are g's current values, so that a
// flag given before the command is the default of the same flag after it.
func (g *globals) register(fs *flag.FlagSet) {
	fs.StringVar(&g.server, "server", g.server, "service base URL (env BACKFILL_SERVER)")
	fs.StringVar(&g.token, "token", g.token, "bearer token (env BACKFILL_TOKEN)")
	fs.StringVar(&g.output, "output", g.output, "output format: table or json")
	fs.StringVar(&g.output, "o", g.output, "shorthand for --output")
}

func (g *globals) validate() error {
	if g.output != "table" && g.output != "json" {
		return usageErrorf("--output must be table or json, not %q", g.output)
	}
	return nil
}

// usageError is a command line that cannot be understood: exit code 3 with a hint.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usageErrorf(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// newFlagSet makes a command's FlagSet with the global flags; usage prints synopsis and
// the flags.
func newFlagSet(name, synopsis string, g *globals, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	g.register(fs)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: backfillctl %s\n\nFlags (global flags too: --server, --token, --output):\n", synopsis)
		fs.VisitAll(func(f *flag.Flag) {
			switch f.Name {
			case "server", "token", "output", "o":
				return
			}
			name, usage := flag.UnquoteUsage(f)
			fmt.Fprintf(stderr, "  --%s\n    \t%s", strings.TrimSpace(f.Name+" "+name), usage)
			if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" && f.DefValue != "0s" {
				fmt.Fprintf(stderr, " (default %s)", f.DefValue)
			}
			fmt.Fprintln(stderr)
		})
	}
	return fs
}

// parse parses flags anywhere among args (the standard flag package stops at the first
// argument that is not a flag) and answers the positional arguments; after "--" every
// argument is positional.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := parseQuietly(fs, args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return positional, nil
		}
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(positional, rest...), nil
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
}

// dateValue is a --from-date/--to-date: an RFC 3339 timestamp, or a date (UTC midnight).
type dateValue struct {
	t   time.Time
	set bool
}

func (d *dateValue) String() string {
	if !d.set {
		return ""
	}
	return d.t.Format(time.RFC3339)
}

func (d *dateValue) Set(s string) error {
	for _, layout := range []string{time.RFC3339, "2006-01-02T15:04:05", "2006-01-02"} {
		if t, err := time.Parse(layout, s); err == nil {
			d.t, d.set = t.UTC(), true
			return nil
		}
	}
	return errors.New("want a date (2024-03-01, UTC midnight) or an RFC 3339 time (2024-03-01T02:00:00Z)")
}

// optBool is a boolean flag that can also be left unset: --active, --active=false, or
// nothing.
type optBool struct{ v *bool }

func (o *optBool) IsBoolFlag() bool { return true }
func (o *optBool) String() string {
	if o == nil || o.v == nil {
		return ""
	}
	return strconv.FormatBool(*o.v)
}

func (o *optBool) Set(s string) error {
	b, err := strconv.ParseBool(s)
	if err != nil {
		return err
	}
	o.v = &b
	return nil
}

// confValue is --dag-run-conf: a JSON object.
type confValue struct{ conf *client.Conf }

func (c *confValue) String() string {
	if c == nil || c.conf == nil {
		return ""
	}
	b, _ := json.Marshal(c.conf)
	return string(b)
}

// Set keeps the object's bytes as typed (compacted): decoding it into Go values first would
// turn 9007199254740993 into ...992 and fail on 1e400 before the service ever saw them.
func (c *confValue) Set(s string) error {
	raw := bytes.TrimSpace([]byte(s))
	if len(raw) == 0 || raw[0] != '{' || !json.Valid(raw) {
		return errors.New(`want a JSON object, e.g. '{"full_refresh": true}'`)
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return errors.New(`want a JSON object, e.g. '{"full_refresh": true}'`)
	}
	conf := client.Conf(buf.Bytes())
	c.conf = &conf
	return nil
}

// parseQuietly parses flags without the flag package's habit of printing the error and then
// the whole usage: a mistyped flag gets one line naming it (as --name, the way the usage
// writes flags) and a pointer to -h; the usage is printed only when asked for.
func parseQuietly(fs *flag.FlagSet, args []string) error {
	usage, out := fs.Usage, fs.Output()
	fs.Usage = func() {}
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	fs.Usage = usage
	fs.SetOutput(out)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, flag.ErrHelp):
		usage()
		return err
	}
	msg := dashDash(err.Error())
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: "); ok {
		if s := suggestFlag(fs, name); s != "" {
			msg += "; " + s
		}
	}
	return &usageError{msg: msg}
}

// dashDash rewrites the flag package's "-name" in an error as "--name".
func dashDash(msg string) string {
	for _, prefix := range []string{"defined: -", "for flag -", "argument: -", "syntax: -"} {
		msg = strings.Replace(msg, prefix, prefix[:len(prefix)-1]+"--", 1)
	}
	return msg
}
