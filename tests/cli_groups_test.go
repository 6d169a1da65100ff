package tests

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/api"
	"github.com/backfillsvc/backfill/client"
	"github.com/creack/pty"
	"github.com/stretchr/testify/require"
)

// TestCLIGroups runs backfillctl's groups commands as a subprocess against real services.
func TestCLIGroups(t *testing.T) {
	t.Parallel()
	bin := buildCLI(t)
	t.Run("DryRunCreateGetListPauseUnpauseCancel", func(t *testing.T) { t.Parallel(); testCLIGroupCommands(t, bin) })
	t.Run("WatchPrintsLinesUntilTheGroupSucceeds", func(t *testing.T) { t.Parallel(); testCLIGroupWatchSucceeds(t, bin) })
	t.Run("WatchDrawsBarsOnATerminalAndExitsOneWhenFailed", func(t *testing.T) { t.Parallel(); testCLIGroupWatchTerminalFails(t, bin) })
	t.Run("WatchStopsAtAPauseWithExitCodeFour", func(t *testing.T) { t.Parallel(); testCLIGroupWatchPaused(t, bin) })
	t.Run("PatchChangesEveryMember", func(t *testing.T) { t.Parallel(); testCLIGroupPatch(t, bin) })
}

// chain defines a → b → c, all daily, and an unrelated DAG "other".
func (e *env) chain() {
	e.t.Helper()
	e.PutDag("a", "@daily", "")
	e.PutDagWith("b", "@daily", "upstreams", []any{up("a")})
	e.PutDagWith("c", "@daily", "upstreams", []any{up("b")})
	e.PutDag("other", "@daily", "")
}

var (
	cliPlanHash = regexp.MustCompile(`(?m)^plan hash (\S+) \(create exactly this plan with --if-match (\S+)\)$`)
	// cliMemberRow captures a member row of groups get: DAG_ID, BACKFILL, DEPTH, STATE, DONE,
	// SUCCESS, FAILED, CANCELED, SKIPPED, RUNNING, QUEUED, BLOCKED.
	cliMemberRow = func(dag string) *regexp.Regexp {
		return regexp.MustCompile(`(?m)^` + dag + `\s+(\d+)\s+(\d+)\s+(\w+)\s+(\d+/\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)$`)
	}
)

// memberRow answers the columns after DAG_ID of dag's row in groups get's members table.
func memberRow(t *testing.T, out, dag string) []string {
	t.Helper()
	m := cliMemberRow(dag).FindStringSubmatch(out)
	require.NotNil(t, m, "a row for member %s in:\n%s", dag, out)
	return m[1:]
}

func testCLIGroupCommands(t *testing.T, bin string) {
	e := newEnv(t)
	e.chain()
	window := []string{"--dag-id", "a", "--from-date", "2024-01-01", "--to-date", "2024-01-03", "--include-downstream", "all"}

	// The dry run: a row per member by depth with its slots by action and blocked runs, then
	// the totals and the plan hash; nothing is written.
	out := okCLI(t, bin, e, append([]string{"groups", "create", "--dry-run"}, window...)...)
	require.Regexp(t, `(?m)^DAG_ID\s+DEPTH\s+SLOTS\s+CREATE\s+REPROCESS\s+SKIP\s+BLOCKED$`, out)
	require.Regexp(t, `(?m)^a\s+0\s+3\s+3\s+0\s+0\s+0$`, out, "a waits for nothing")
	require.Regexp(t, `(?m)^b\s+1\s+3\s+3\s+0\s+0\s+3$`, out, "each of b's days waits for a's")
	require.Regexp(t, `(?m)^c\s+2\s+3\s+3\s+0\s+0\s+3$`, out)
	require.NotContains(t, out, "other")
	require.Contains(t, out, "3 members, 9 slots: 9 create, 0 reprocess, 0 skip (nothing was written)")
	require.Contains(t, out, "6 dependencies between runs; 6 runs blocked at the start")
	hash := cliPlanHash.FindStringSubmatch(out)
	require.NotNil(t, hash, out)
	require.Equal(t, hash[1], hash[2])
	var none client.BackfillGroupCollection
	require.NoError(t, json.Unmarshal([]byte(okCLI(t, bin, e, "-o", "json", "groups", "list")), &none))
	require.Zero(t, none.TotalEntries, "the dry run wrote nothing")

	// A stale plan hash is refused with the service's problem and exit code 3.
	r := runCLI(t, bin, e, append([]string{"groups", "create", "--if-match", "stale"}, window...)...)
	require.Equal(t, 3, r.code, "stdout: %s\nstderr: %s", r.stdout, r.stderr)
	require.Contains(t, r.stderr, "backfillctl groups create: error: plan_changed (412)")

	out = okCLI(t, bin, e, append([]string{"groups", "create", "--if-match", hash[1], "--max-failed-runs", "4",
		"--reason", "TICKET-7", "--actor", "alice", "--max-active-runs", "2", "--dag-run-conf", `{"full":true}`}, window...)...)
	m := cliIDLine.FindStringSubmatch(out)
	require.NotNil(t, m, "create prints the group: %s", out)
	id := m[1]
	for _, want := range []string{
		`STATE:\s+running`, `TARGETS:\s+a`, `INCLUDE DOWNSTREAM:\s+all`, `FROM DATE:\s+2024-01-01T00:00:00Z`,
		`PROGRESS:\s+0/9 done \(0%\)`, `RUNS:\s+success 0  failed 0  canceled 0  skipped 0  running 0  queued 9 \(6 blocked\)`,
		`DEPENDENCIES:\s+6`, `PLAN HASH:\s+` + regexp.QuoteMeta(hash[1]), `MAX ACTIVE RUNS:\s+2 per member`,
		`MAX FAILED RUNS:\s+4`, `DAG RUN CONF:\s+\{"full":true\}`, `CREATED BY:\s+alice`, `REASON:\s+TICKET-7`,
		`COMPLETED AT:\s+-`,
	} {
		require.Regexp(t, `(?m)^`+want+`$`, out)
	}
	require.Regexp(t, `(?m)^DAG_ID\s+BACKFILL\s+DEPTH\s+STATE\s+DONE\s+SUCCESS\s+FAILED\s+CANCELED\s+SKIPPED\s+RUNNING\s+QUEUED\s+BLOCKED$`, out)
	rowA, rowB, rowC := memberRow(t, out, "a"), memberRow(t, out, "b"), memberRow(t, out, "c")
	require.Equal(t, []string{"0", "running", "0/3", "0", "0", "0", "0", "0", "3", "0"}, rowA[1:])
	require.Equal(t, []string{"1", "running", "0/3", "0", "0", "0", "0", "0", "3", "3"}, rowB[1:])
	require.Equal(t, []string{"2", "running", "0/3", "0", "0", "0", "0", "0", "3", "3"}, rowC[1:])
	require.Less(t, strings.Index(out, "\na "), strings.Index(out, "\nc "), "members by depth")

	// get, as a table and as JSON, answers the same group.
	require.Equal(t, out, okCLI(t, bin, e, "groups", "get", id))
	var g client.BackfillGroup
	require.NoError(t, json.Unmarshal([]byte(okCLI(t, bin, e, "-o", "json", "groups", "get", id)), &g))
	require.Equal(t, id, fmt.Sprint(g.Id))
	require.Equal(t, hash[1], g.PlanHash)
	require.Len(t, g.Members, 3)
	for i, dag := range []string{"a", "b", "c"} {
		require.Equal(t, dag, g.Members[i].DagId, "by depth")
		require.Equal(t, int32(i), g.Members[i].Depth, dag)
	}
	require.Equal(t, rowB[0], fmt.Sprint(g.Members[1].BackfillId))

	// The same window again: every member's DAG has an active backfill, each one named.
	r = runCLI(t, bin, e, append([]string{"groups", "create"}, window...)...)
	require.Equal(t, 3, r.code, "stdout: %s\nstderr: %s", r.stdout, r.stderr)
	require.Empty(t, r.stdout)
	require.Contains(t, r.stderr, "backfill_already_running (409)")
	require.Contains(t, r.stderr, fmt.Sprintf("conflicts: a (backfill %s), b (backfill %s), c (backfill %s)", rowA[0], rowB[0], rowC[0]))

	// list: the group's row, filtered by a member's DAG and by state.
	out = okCLI(t, bin, e, "groups", "list")
	require.Regexp(t, `(?m)^ID\s+STATE\s+TARGETS\s+MEMBERS\s+FROM_DATE\s+TO_DATE\s+DONE\s+SUCCESS\s+FAILED\s+CANCELED\s+SKIPPED\s+BLOCKED\s+CREATED_AT\s+CREATED_BY\s+REASON$`, out)
	require.Regexp(t, `(?m)^`+id+`\s+running\s+a\s+3\s+2024-01-01T00:00:00Z\s+2024-01-03T00:00:00Z\s+0/9\s+0\s+0\s+0\s+0\s+6\s+\S+\s+alice\s+TICKET-7$`, out)
	require.Regexp(t, `(?m)^`+id+`\s`, okCLI(t, bin, e, "groups", "list", "--dag-id", "c", "--state", "running"))
	require.NotRegexp(t, `(?m)^`+id+`\s`, okCLI(t, bin, e, "groups", "list", "--dag-id", "other"))
	require.NotRegexp(t, `(?m)^`+id+`\s`, okCLI(t, bin, e, "groups", "list", "--state", "succeeded"))
	r = runCLI(t, bin, e, "groups", "list", "--state", "done")
	require.Equal(t, 3, r.code)
	require.Contains(t, r.stderr, `--state must be one of running, paused, canceling, succeeded, failed, canceled, not "done"`)

	// A member is acted on through its group.
	r = runCLI(t, bin, e, "backfills", "pause", rowB[0])
	require.Equal(t, 3, r.code)
	require.Contains(t, r.stderr, "managed_by_group (409)")

	out = okCLI(t, bin, e, "groups", "pause", id)
	require.Regexp(t, `(?m)^STATE:\s+paused \(user\)$`, out)
	for _, dag := range []string{"a", "b", "c"} {
		require.Equal(t, "paused", memberRow(t, out, dag)[2], dag)
	}
	out = okCLI(t, bin, e, "groups", "unpause", id)
	require.Regexp(t, `(?m)^STATE:\s+running$`, out)
	require.Equal(t, "running", memberRow(t, out, "c")[2])

	// Nothing runs, so the cancel ends every member and the group at once.
	out = okCLI(t, bin, e, "groups", "cancel", id)
	require.Regexp(t, `(?m)^STATE:\s+canceled$`, out)
	require.Regexp(t, `(?m)^RUNS:\s+success 0  failed 0  canceled 9  skipped 0  running 0  queued 0 \(0 blocked\)$`, out)
	require.Equal(t, []string{"2", "canceled", "3/3", "0", "0", "3", "0", "0", "0", "0"}, memberRow(t, out, "c")[1:])
	require.NotRegexp(t, `(?m)^COMPLETED AT:\s+-$`, out)
	r = runCLI(t, bin, e, "groups", "pause", id)
	require.Equal(t, 3, r.code)
	require.Contains(t, r.stderr, "backfill_not_active (409)")
	r = runCLI(t, bin, e, "groups", "get", "999")
	require.Equal(t, 3, r.code)
	require.Contains(t, r.stderr, "backfill_group_not_found (404)")

	// A watch of a canceled group ends at once with the canceled exit code.
	r = runCLI(t, bin, e, "groups", "watch", id, "--timeout", "20s")
	require.Equal(t, 2, r.code, "stdout: %s\nstderr: %s", r.stdout, r.stderr)
	require.Contains(t, r.stdout, "group "+id+" canceled: 9/9 done (success 0, failed 0, canceled 9, skipped 0)")
}

// Without a terminal: a stamped line for the group and a row per member at once, before any
// run is worked (b's runs blocked), then lines until the sweep ends the group; exit code 0.
func testCLIGroupWatchSucceeds(t *testing.T, bin string) {
	e := newEnv(t)
	e.PutDag("a", "@daily", "")
	e.PutDagWith("b", "@daily", "upstreams", []any{up("a")})
	g := e.CreateGroup([]string{"a"}, day(1, 1), day(1, 3), "include_downstream", "direct")
	id := fmt.Sprint(g.Id)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "groups", "watch", id, "--interval", "100ms", "--timeout", "50s")
	cmd.Env = cliEnv("BACKFILL_SERVER=" + e.URL)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	lines := bufio.NewReader(stdout)
	var first strings.Builder
	for range 4 { // the group's line, the members' header, a and b
		l, err := lines.ReadString('\n')
		if err != nil {
			// stderr is read only once the process is gone: exec writes it meanwhile.
			cancel()
			_ = cmd.Wait()
			t.Fatalf("reading the watch's first lines: %v; stderr: %s", err, stderr.String())
		}
		first.WriteString(l)
	}
	require.Regexp(t, `^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ group `+id+` running\s+0%  0/6  blocked 3\n`, first.String())
	require.Regexp(t, `(?m)^  DAG_ID\s+DEPTH\s+STATE\s+PROGRESS\s+DONE\s+BLOCKED\s+RUNNING\s+QUEUED\s+SUCCESS\s+FAILED\s+CANCELED\s+SKIPPED$`, first.String())
	require.Regexp(t, `(?m)^  a\s+0\s+running\s+0%\s+0/3\s+0\s+0\s+3\s+0\s+0\s+0\s+0$`, first.String())
	require.Regexp(t, `(?m)^  b\s+1\s+running\s+0%\s+0/3\s+3\s+0\s+3\s+0\s+0\s+0\s+0$`, first.String())

	e.workUntilIdle(2, nil)
	e.SweepOnce()
	rest, err := io.ReadAll(lines)
	require.NoError(t, err)
	werr := cmd.Wait()
	var exitErr *exec.ExitError
	if werr != nil && !errors.As(werr, &exitErr) {
		require.NoError(t, werr)
	}
	out := first.String() + string(rest)
	require.Equal(t, 0, cmd.ProcessState.ExitCode(), "stdout: %s\nstderr: %s", out, stderr.String())
	require.Regexp(t, `(?m)^  b\s+1\s+succeeded\s+100%\s+3/3\s+0\s+0\s+0\s+3\s+0\s+0\s+0$`, out, "the members as they ended")
	require.Regexp(t, `(?m)^group `+id+` succeeded: 6/6 done \(success 6, failed 0, canceled 0, skipped 0\) in \S+$`, out)
}

// In a terminal: the group's bar and a bar per member, redrawn in place while the runs are
// worked; a's failure cancels b's run of that day, and the group ends failed: exit code 1.
func testCLIGroupWatchTerminalFails(t *testing.T, bin string) {
	e := newEnv(t)
	e.PutDag("a", "@daily", "")
	e.PutDagWith("b", "@daily", "upstreams", []any{up("a")})
	g := e.CreateGroup([]string{"a", "b"}, day(1, 1), day(1, 3))
	id := fmt.Sprint(g.Id)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "groups", "watch", id, "--interval", "30ms", "--timeout", "50s")
	cmd.Env = cliEnv("BACKFILL_SERVER="+e.URL, "TERM=xterm")
	ptmx, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 24, Cols: 120})
	require.NoError(t, err)
	defer ptmx.Close()
	var (
		mu     sync.Mutex
		screen bytes.Buffer
	)
	read := make(chan error, 1)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := ptmx.Read(buf)
			mu.Lock()
			screen.Write(buf[:n])
			mu.Unlock()
			if err != nil {
				read <- err // EIO once the terminal's last writer is gone and its output drained
				return
			}
		}
	}()
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return strings.Contains(screen.String(), "group "+id+" running")
	}, 20*time.Second, 10*time.Millisecond, "the watch draws the group before its runs are worked")

	e.workUntilIdle(2, func(r api.DagRun) string {
		if r.DagId == "a" && r.LogicalDate.Equal(day(1, 2)) {
			return "failed"
		}
		return "success"
	})
	e.SweepOnce()
	waitErr := cmd.Wait()
	select {
	case <-read:
	case <-ctx.Done():
		t.Fatal("the terminal's output did not end")
	}
	var exitErr *exec.ExitError
	if waitErr != nil && !errors.As(waitErr, &exitErr) {
		require.NoError(t, waitErr)
	}
	mu.Lock()
	out := screen.String()
	mu.Unlock()
	t.Logf("terminal session:\n%q", out)

	require.Equal(t, 1, cmd.ProcessState.ExitCode())
	require.Regexp(t, `group `+id+` running\s+\[░{24}\]\s+0%  0/6  blocked 3`, out, "the group's bar before any run is worked")
	require.Regexp(t, `  b\s+1\s+running\s+\[░{12}\]\s+0%\s+0/3\s+3\s`, out, "a member's bar and its blocked runs")
	require.Contains(t, out, "\x1b[1A\x1b[2K", "the drawing is redrawn in place")
	require.Regexp(t, `  a\s+0\s+failed\s+\[█{12}\]\s+100%\s+3/3\s+0\s+0\s+0\s+2\s+1\s+0\s+0`, out)
	require.Regexp(t, `  b\s+1\s+failed\s+\[█{12}\]\s+100%\s+3/3\s+0\s+0\s+0\s+2\s+0\s+1\s+0`, out, "b's run of the failed day was canceled")
	require.Contains(t, out, "group "+id+" failed: 6/6 done (success 4, failed 1, canceled 1, skipped 0)")
}

// A paused group hands nothing out: the watch stops with why and what to do, exit code 4,
// unless --wait-through-pause, which waits on (here until its timeout, exit code 3).
func testCLIGroupWatchPaused(t *testing.T, bin string) {
	e := newEnv(t)
	e.PutDag("p", "@daily", "")
	g := e.CreateGroup([]string{"p"}, day(1, 1), day(1, 2))
	id := fmt.Sprint(g.Id)
	okCLI(t, bin, e, "groups", "pause", id)

	r := runCLI(t, bin, e, "groups", "watch", id, "--timeout", "20s")
	require.Equal(t, 4, r.code, "stdout: %s\nstderr: %s", r.stdout, r.stderr)
	require.Contains(t, r.stdout, "group "+id+" paused by a pause request.\n"+
		"next: resume with 'backfillctl groups unpause "+id+"', or stop with 'backfillctl groups cancel "+id+"'")

	r = runCLI(t, bin, e, "groups", "watch", id, "--wait-through-pause", "--interval", "200ms", "--timeout", "1s")
	require.Equal(t, 3, r.code, "stdout: %s\nstderr: %s", r.stdout, r.stderr)
	require.Contains(t, r.stderr, "gave up watching group "+id+" after 1s; it is still paused")

	// The failure budget pauses the group: the watch names the member whose runs failed.
	okCLI(t, bin, e, "groups", "cancel", id)
	g = e.CreateGroup([]string{"p"}, day(2, 1), day(2, 3), "max_failed_runs", 1)
	id = fmt.Sprint(g.Id)
	e.ReportFailed(e.ClaimDag("w", "p", 1)[0], "boom")
	r = runCLI(t, bin, e, "groups", "watch", id, "--timeout", "20s")
	require.Equal(t, 4, r.code, "stdout: %s\nstderr: %s", r.stdout, r.stderr)
	require.Contains(t, r.stdout, fmt.Sprintf("group %s paused by the failure budget: 1 failed ≥ max_failed_runs 1.\n"+
		"next: see why runs failed with 'backfillctl backfills runs %d --state failed' (p); "+
		"resume with 'backfillctl groups unpause %s', or stop with 'backfillctl groups cancel %s'", id, g.Members[0].BackfillId, id, id))
}

// backfillctl groups patch changes the group's and its members' priority and limits.
func testCLIGroupPatch(t *testing.T, bin string) {
	e := newEnv(t)
	e.PutDag("gp", "@daily", "")
	g := e.CreateGroup([]string{"gp"}, day(1, 1), day(1, 2))
	out := okCLI(t, bin, e, "groups", "patch", fmt.Sprint(g.Id), "--priority", "4", "--max-active-runs", "3")
	require.Contains(t, out, "gp")
	m := e.GetBackfill(g.Members[0].BackfillId)
	require.Equal(t, int32(4), m.Priority)
	require.Equal(t, int32(3), m.MaxActiveRuns)
	r := runCLI(t, bin, e, "groups", "patch", fmt.Sprint(g.Id))
	require.NotZero(t, r.code, r.stdout)
	require.Contains(t, r.stderr, "nothing to change")
}
