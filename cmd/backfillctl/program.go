package main

import (
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/backfillsvc/backfill/client"
)

// programRun is one start of the program for one run; its run is procgroup_unix.go's (a
// process group that a stop ends whole), or procgroup_other.go's refusal.
type programRun struct {
	path    string
	args    []string
	env     []string
	stdout  io.Writer
	stderr  io.Writer
	timeout time.Duration // 0: none
	grace   time.Duration
	scope   string // the run's token in BACKFILL_RUN_SCOPE (procscope.go)
	started func(pid int)
}

// runValues are what a program learns about its run: the same values in its environment
// and in the {{ ... }} templates of its arguments.
type runValues struct {
	RunID       string
	LogicalDate string // RFC 3339 in UTC, with the fraction of a second when it has one
	DS          string // YYYY-MM-DD of the logical date, UTC
	Conf        string // JSON; "null" when the run has none
	Attempt     int
	// CodeRef is the backfill's code_ref ("" when it has none).
	CodeRef string
	// Traceparent is the run's span in the service's trace ("" when the service does not
	// trace), given to the program as TRACEPARENT so that its own spans join the trace.
	Traceparent string
}

func valuesOf(run client.DagRun) runValues {
	conf := "null"
	if run.Conf != nil && len(*run.Conf) > 0 {
		conf = string(*run.Conf)
	}
	ld := run.LogicalDate.UTC()
	traceparent := ""
	if run.Traceparent != nil {
		traceparent = *run.Traceparent
	}
	codeRef := ""
	if run.CodeRef != nil {
		codeRef = *run.CodeRef
	}
	return runValues{
		CodeRef:     codeRef,
		RunID:       run.RunId,
		LogicalDate: ld.Format(time.RFC3339Nano),
		DS:          ld.Format(time.DateOnly),
		Conf:        conf,
		Attempt:     int(run.Attempt),
		Traceparent: traceparent,
	}
}

// env is the run's part of the program's environment.
func (v runValues) env() []string {
	env := []string{
		"BACKFILL_RUN_ID=" + v.RunID,
		"BACKFILL_LOGICAL_DATE=" + v.LogicalDate,
		"BACKFILL_DS=" + v.DS,
		"BACKFILL_CONF=" + v.Conf,
		"BACKFILL_ATTEMPT=" + strconv.Itoa(v.Attempt),
		// Set even when empty, so that a value in the executor's own environment never
		// passes for the run's.
		"BACKFILL_CODE_REF=" + v.CodeRef,
	}
	if v.Traceparent != "" {
		env = append(env, "TRACEPARENT="+v.Traceparent)
	}
	return env
}

// templateRef matches {{ name }} where name is a bare word (letters, digits, _), with any
// spacing inside the braces. Such a name must be one of templateNames exactly, in the same
// case: "{{ DS }}" or "{{ds1}}" is a typo, refused before anything is claimed. Brace text that
// is not a bare word ("{{.State}}", "{{ json . }}") belongs to another template language (a
// program's own -f flag, say) and is passed as written.
var templateRef = regexp.MustCompile(`\{\{\s*([A-Za-z0-9_]+)\s*\}\}`)

// templateNames are the templates the executor fills in.
var templateNames = []string{"run_id", "logical_date", "ds", "conf", "code_ref"}

// expand substitutes the run's values into one argument; checkTemplates has refused any other
// name before the first claim.
func (v runValues) expand(arg string) string {
	return templateRef.ReplaceAllStringFunc(arg, func(m string) string {
		switch templateRef.FindStringSubmatch(m)[1] {
		case "run_id":
			return v.RunID
		case "logical_date":
			return v.LogicalDate
		case "ds":
			return v.DS
		case "conf":
			return v.Conf
		case "code_ref":
			return v.CodeRef
		}
		return m
	})
}

// checkTemplates refuses, before anything is claimed, an argument that names a template the
// executor does not fill: a typo would otherwise reach every run's program.
func checkTemplates(args []string) error {
	for _, a := range args {
		for _, m := range templateRef.FindAllStringSubmatch(a, -1) {
			if slices.Contains(templateNames, m[1]) {
				continue
			}
			hint := ""
			if lower := strings.ToLower(m[1]); slices.Contains(templateNames, lower) {
				hint = fmt.Sprintf("; names are case-sensitive: did you mean {{ %s }}?", lower)
			}
			return usageErrorf("unknown template %s in %q (known: %s)%s", m[0], a, strings.Join(templateNames, ", "), hint)
		}
	}
	return nil
}

// tailSize is how much of a program's stderr becomes a failed run's note: the service keeps
// at most 4,096 characters.
const tailSize = 4096

// tail keeps the last tailSize bytes written to it.
type tail struct {
	mu  sync.Mutex
	buf []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - tailSize; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

// String is the tail, starting at a character boundary and valid UTF-8.
func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.buf
	for len(b) > 0 && !utf8.RuneStart(b[0]) {
		b = b[1:]
	}
	return string([]rune(string(b)))
}

// programError is a run whose program did not succeed: the note is its stderr's tail, or,
// when it wrote nothing there, what happened.
type programError struct {
	what   string // "exit status 3", "killed by signal 9", "timed out after 1s"
	stderr string
	// exitCode is the program's exit status when it exited by itself (-1 after a signal; 0
	// when it never ran to an exit). Only exTempFail is told apart.
	exitCode int
}

// exTempFail is sysexits.h's EX_TEMPFAIL: "try again later". The executor reports a run
// whose program exits with it as deferred, not failed.
const exTempFail = 75

func (e *programError) Error() string {
	if e.stderr != "" {
		return e.stderr
	}
	return e.what
}

// lockedWriter serializes writes from the programs running at once.
type lockedWriter struct {
	mu *sync.Mutex
	w  interface{ Write([]byte) (int, error) }
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// jsonLine is one line of -o json output.
func jsonLine(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf(`{"error":%q}`, err.Error())
	}
	return string(b)
}
