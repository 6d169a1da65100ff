package tests

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/sweeper"
	"github.com/stretchr/testify/require"
)

// walkthroughCommand is one command of a README block marked ```sh walkthrough, with what
// its trailing comment says it does: "# exit N: ..." for a non-zero exit code, and
// "# prints TEXT: ..." for something its output must contain.
type walkthroughCommand struct {
	line     string
	exitCode int
	prints   string
}

var (
	walkthroughExit   = regexp.MustCompile(`#\s*exit (\d+)\b`)
	walkthroughPrints = regexp.MustCompile(`#\s*prints (.+?):`)
)

// readmeWalkthrough reads the commands of the README's walkthrough blocks in order,
// joining lines continued with a backslash.
func readmeWalkthrough(t *testing.T) []walkthroughCommand {
	t.Helper()
	readme, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	var cmds []walkthroughCommand
	inBlock, pending := false, ""
	sc := bufio.NewScanner(bytes.NewReader(readme))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "```sh walkthrough"):
			inBlock = true
			continue
		case inBlock && strings.HasPrefix(line, "```"):
			inBlock = false
			continue
		case !inBlock:
			continue
		}
		if cont, ok := strings.CutSuffix(line, "\\"); ok {
			pending += cont
			continue
		}
		line = pending + line
		pending = ""
		if trimmed := strings.TrimSpace(line); trimmed == "" || strings.HasPrefix(trimmed, "#") {
			continue
		}
		cmd := walkthroughCommand{line: line}
		if m := walkthroughExit.FindStringSubmatch(line); m != nil {
			cmd.exitCode, _ = strconv.Atoi(m[1])
		}
		if m := walkthroughPrints.FindStringSubmatch(line); m != nil {
			cmd.prints = m[1]
		}
		cmds = append(cmds, cmd)
	}
	require.NoError(t, sc.Err())
	return cmds
}

// TestReadmeWalkthroughsRunInOrderOnOneService runs the README's curl walk-through and then
// its CLI walk-through against one fresh service sweeping every second, as a reader who
// follows the README does: the two must not collide (DAG ids, idempotency keys, backfill
// ids), and the curl one must leave nothing running (its backfill ends canceled at once, not
// when a lease expires).
func TestReadmeWalkthroughsRunInOrderOnOneService(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// Terminal 1: SWEEP_INTERVAL=1s.
	sweep := sweeper.New(e.Store, sweeper.Config{Interval: time.Second})
	sweep.Start(context.Background())
	t.Cleanup(sweep.Stop)

	runCurlWalkthrough(t, e)
	// The curl walk-through's backfill is #1; canceled, with its one claimed run reported,
	// the next sweep finishes it.
	deadline := time.Now().Add(30 * time.Second)
	for e.GetBackfill(1).State != "canceled" {
		require.True(t, time.Now().Before(deadline), "the curl walk-through's backfill is still %s", e.GetBackfill(1).State)
		time.Sleep(200 * time.Millisecond)
	}
	runCLIWalkthrough(t, e)
}

// runCLIWalkthrough runs the README's CLI walkthrough, command by command through bash from
// the repository root, against what its first block starts by hand: the demo executor. Every
// command must exit as the README says (0 unless its comment says otherwise) and print what
// the README says it prints.
func runCLIWalkthrough(t *testing.T, e *env) {
	t.Helper()
	cmds := readmeWalkthrough(t)
	require.GreaterOrEqual(t, len(cmds), 10, "the walkthrough blocks are found")
	require.Equal(t, "make build", strings.Fields(cmds[0].line)[0]+" "+strings.Fields(cmds[0].line)[1],
		"the walkthrough builds the CLI first")

	root, err := filepath.Abs("..")
	require.NoError(t, err)
	env := cliEnv("BACKFILL_SERVER=" + e.URL)
	started := false
	for i, c := range cmds {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		cmd := exec.CommandContext(ctx, "bash", "-c", c.line)
		cmd.Dir, cmd.Env = root, env
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		cancel()
		if _, isExit := err.(*exec.ExitError); err != nil && !isExit {
			require.NoError(t, err, c.line)
		}
		require.Equal(t, c.exitCode, cmd.ProcessState.ExitCode(), "command %d: %s\nstdout: %s\nstderr: %s", i+1, c.line, stdout.String(), stderr.String())
		if c.prints != "" {
			require.Contains(t, stdout.String(), c.prints, c.line)
		}
		if !started {
			// Terminal 2, once the CLI is built: the demo executor, as the README starts it.
			exe := exec.Command(filepath.Join(root, "bin", "backfillctl"), "executor", "--worker-id", "w1", "--dag-id", "sales", "--limit", "4", "--sleep", "200ms")
			exe.Env = env
			require.NoError(t, exe.Start())
			t.Cleanup(func() { _ = exe.Process.Kill(); _ = exe.Wait() })
			started = true
		}
	}
}

var (
	curlStatusWanted = regexp.MustCompile(`# → (\d{3})`)
	curlStatusGot    = regexp.MustCompile(`(?m)^README_HTTP_STATUS (\d{3})$`)
)

// runCurlWalkthrough runs the README's curl block as one bash script (its lines share the H
// variable) against e, with localhost:8080 pointed at it and curl wrapped to report each
// answer's status, which must be the one its "# →" says.
func runCurlWalkthrough(t *testing.T, e *env) {
	t.Helper()
	readme, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	block := regexp.MustCompile("(?s)```sh curl-walkthrough\n(.*?)```").FindSubmatch(readme)
	require.NotNil(t, block, "the README has a curl-walkthrough block")
	script := string(block[1])
	var want []string
	for _, m := range curlStatusWanted.FindAllStringSubmatch(script, -1) {
		want = append(want, m[1])
	}
	require.Len(t, want, strings.Count(script, "curl "), "every request states its status")

	realCurl, err := exec.LookPath("curl")
	require.NoError(t, err, "the README's walkthrough uses curl")
	shimDir := t.TempDir()
	shim := "#!/bin/sh\nexec " + realCurl + " -w '%{stderr}README_HTTP_STATUS %{http_code}\\n' \"$@\"\n"
	require.NoError(t, os.WriteFile(filepath.Join(shimDir, "curl"), []byte(shim), 0o755))

	host := strings.TrimPrefix(e.URL, "http://")
	cmd := exec.Command("bash", "-e", "-c", strings.ReplaceAll(script, "localhost:8080", host))
	cmd.Env = append(cliEnv(), "PATH="+shimDir+":"+os.Getenv("PATH"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "stdout: %s\nstderr: %s", stdout.String(), stderr.String())
	var got []string
	for _, m := range curlStatusGot.FindAllStringSubmatch(stderr.String(), -1) {
		got = append(got, m[1])
	}
	require.Equal(t, want, got, "stdout: %s", stdout.String())
	require.Contains(t, stdout.String(), `"code":"backfill_already_running"`)
}

// The README's first screen keeps the two commands a newcomer needs: run the service, run the
// tests.
func TestReadmeFirstScreenRunsTheServiceAndTheTests(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	first := regexp.MustCompile("(?s)```sh\n(.*?)```").FindSubmatch(readme)
	require.NotNil(t, first)
	require.Less(t, strings.Count(string(readme[:strings.Index(string(readme), string(first[0]))]), "\n"), 25, "the first block is on the first screen")
	require.Contains(t, string(first[1]), "make run")
	require.Contains(t, string(first[1]), "make test")
}
