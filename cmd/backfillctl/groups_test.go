package main

import (
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/client"
	"github.com/stretchr/testify/require"
)

// groupAt is group 7 of two members with the progress of step: running with b's runs blocked,
// then a done, then failed.
func groupAt(step int) client.BackfillGroup {
	created := time.Date(2024, 3, 1, 0, 0, 0, 0, time.UTC)
	g := client.BackfillGroup{Id: 7, State: client.BackfillStateRunning, CreatedAt: created, DagIds: []string{"a"},
		Members: []client.BackfillGroupMember{
			{DagId: "a", BackfillId: 11, Depth: 0, State: client.BackfillStateRunning, Progress: client.BackfillProgress{Total: 2, Queued: 2}},
			{DagId: "b", BackfillId: 12, Depth: 1, State: client.BackfillStateRunning, Progress: client.BackfillProgress{Total: 2, Queued: 2, Blocked: 2}},
		}}
	switch {
	case step >= 2:
		g.State, g.Members[0].State, g.Members[1].State = client.BackfillStateFailed, client.BackfillStateFailed, client.BackfillStateFailed
		g.Members[0].Progress = client.BackfillProgress{Total: 2, Success: 1, Failed: 1}
		g.Members[1].Progress = client.BackfillProgress{Total: 2, Success: 1, Canceled: 1}
		done := created.Add(90 * time.Second)
		g.CompletedAt = &done
	case step == 1:
		g.Members[0].Progress = client.BackfillProgress{Total: 2, Success: 2}
		g.Members[1].Progress = client.BackfillProgress{Total: 2, Queued: 2}
	}
	for _, m := range g.Members {
		p := &g.Progress
		p.Total += m.Progress.Total
		p.Queued += m.Progress.Queued
		p.Success += m.Progress.Success
		p.Failed += m.Progress.Failed
		p.Canceled += m.Progress.Canceled
		p.Blocked += m.Progress.Blocked
	}
	return g
}

// Without a terminal, the watch prints the group and its members at once, polls (a busy
// answer is waited out), and ends on the failed group with exit code 1 and its summary.
func TestGroupsWatchPollsUntilTheGroupEndsAndExitsAsWatch(t *testing.T) {
	var polls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		require.Equal(t, "/api/v1/backfill_groups/7", r.URL.Path)
		n := int(polls.Add(1))
		if n == 2 {
			w.Header().Set("Retry-After", "0")
			answer(w, http.StatusServiceUnavailable, client.Problem{Code: "busy", Title: "busy"})
			return
		}
		answer(w, http.StatusOK, groupAt(n/2))
	}))
	t.Cleanup(srv.Close)

	code, stdout, stderr := invoke(t, srv.URL, nil, "groups", "watch", "7", "--interval", "5ms", "--timeout", "10s")
	require.Equal(t, exitFailed, code, "stdout: %s\nstderr: %s", stdout, stderr)
	require.Regexp(t, `^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ group 7 running\s+0%  0/4  blocked 2\n`, stdout)
	require.Regexp(t, `(?m)^  b\s+1\s+running\s+0%\s+0/2\s+2\s+0\s+2\s+0\s+0\s+0\s+0$`, stdout)
	require.Regexp(t, `(?m)^  b\s+1\s+failed\s+100%\s+2/2\s+0\s+0\s+0\s+1\s+0\s+1\s+0$`, stdout, "the members as the group ended")
	require.True(t, strings.HasSuffix(stdout, "group 7 failed: 4/4 done (success 2, failed 1, canceled 1, skipped 0) in 1m30s\n"), stdout)
	require.GreaterOrEqual(t, polls.Load(), int32(4))
}

// A group's create is sent with an Idempotency-Key, sent again with the same key after a 503;
// a 409 names every conflicting member DAG on stderr, exit code 3.
func TestGroupsCreateRetriesWithItsKeyAndNamesEveryConflict(t *testing.T) {
	var (
		mu   sync.Mutex
		keys []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		require.Equal(t, "/api/v1/backfill_groups", r.URL.Path)
		mu.Lock()
		keys = append(keys, r.Header.Get("Idempotency-Key"))
		n := len(keys)
		mu.Unlock()
		require.Equal(t, `"abc"`, r.Header.Get("If-Match"))
		if n == 1 {
			w.Header().Set("Retry-After", "0")
			answer(w, http.StatusServiceUnavailable, client.Problem{Code: "busy", Title: "busy"})
			return
		}
		answer(w, http.StatusConflict, client.Problem{Code: client.ProblemCodeBackfillAlreadyRunning, Title: "conflict",
			Detail:           "DAGs of the group already have an active backfill (conflicts lists them); nothing was created",
			ActiveBackfillId: client.Ptr[int64](3),
			Conflicts:        &[]client.GroupConflict{{DagId: "p", ActiveBackfillId: 3}, {DagId: "r", ActiveBackfillId: 5}}})
	}))
	t.Cleanup(srv.Close)

	code, stdout, stderr := invoke(t, srv.URL, nil, "groups", "create", "--dag-id", "p", "--dag-id", "q",
		"--from-date", "2024-03-01", "--to-date", "2024-03-02", "--if-match", "abc")
	require.Equal(t, exitError, code)
	require.Empty(t, stdout)
	require.Contains(t, stderr, "backfill_already_running (409): DAGs of the group already have an active backfill "+
		"(conflicts lists them); nothing was created; conflicts: p (backfill 3), r (backfill 5)")
	require.Len(t, keys, 2)
	require.NotEmpty(t, keys[0])
	require.Equal(t, keys[0], keys[1], "the retry sends the same key")
}

// The flags a group's create checks before asking the service.
func TestGroupsCreateRefusesAnIncompleteOrUnknownRequest(t *testing.T) {
	for args, want := range map[string]string{
		"--from-date 2024-03-01 --to-date 2024-03-02":                                   "--dag-id is required",
		"--dag-id a --from-date 2024-03-01":                                             "--from-date and --to-date are required",
		"--dag-id a --from-date 2024-03-01 --to-date 2024-03-02 --include-downstream x": `--include-downstream must be one of none, direct, all, not "x"`,
	} {
		code, _, stderr := invoke(t, "http://127.0.0.1:1", nil, append([]string{"groups", "create"}, strings.Fields(args)...)...)
		require.Equal(t, exitError, code, args)
		require.Regexp(t, regexp.QuoteMeta(want), stderr, args)
	}
}
