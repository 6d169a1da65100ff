package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/client"
	"github.com/stretchr/testify/require"
)

// The command table and the usage name the same commands, and each command's -h prints its
// synopsis and exits 0.
func TestUsageAndTheCommandTableNameTheSameCommands(t *testing.T) {
	table := map[string]bool{}
	for _, cmd := range commands {
		require.False(t, table[cmd.name], "%s declared twice", cmd.name)
		table[cmd.name] = true
		require.Contains(t, usage, "\n  "+cmd.name+" ", "the usage does not show %s", cmd.name)
		code, stdout, stderr := invoke(t, "", nil, append(strings.Fields(cmd.name), "-h")...)
		require.Equal(t, exitOK, code, cmd.name)
		require.Empty(t, stdout, cmd.name)
		require.True(t, strings.HasPrefix(stderr, "Usage: backfillctl "+strings.TrimSpace(cmd.name+" "+cmd.synopsis)+"\n"), stderr)
	}
	for _, line := range strings.Split(usage, "\n") {
		words := strings.Fields(line)
		if !strings.HasPrefix(line, "  ") || strings.HasPrefix(line, "   ") || len(words) == 0 || nounUsage(words[0]) == "" {
			continue
		}
		require.True(t, table[words[0]+" "+words[1]], "the usage shows %q, which is not a command", words[0]+" "+words[1])
	}
}

// A listing with cursors sends only the cursor when given one (an offset would be refused),
// shows the page as a table and then how to read the next one, without the offset footer.
func TestListWithCursorSendsNoOffsetAndPrintsTheNextCursor(t *testing.T) {
	var query string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		query = r.URL.Query().Encode() // sorted by key
		next := "c2"
		answer(w, http.StatusOK, client.DagRunCollection{TotalEntries: 9, NextCursor: &next, DagRuns: []client.DagRun{
			{Id: 5, DagId: "d", RunId: "r5", LogicalDate: time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC), State: client.DagRunStateQueued, Attempt: 1},
		}})
	}))
	defer srv.Close()

	code, stdout, stderr := invoke(t, srv.URL, nil, "runs", "list", "d", "--cursor", "c1", "--state", "queued")
	require.Equal(t, exitOK, code, stderr)
	require.Equal(t, "cursor=c1&limit=50&state=queued", query)
	require.Regexp(t, `(?m)^ID\s+RUN_ID\s+LOGICAL_DATE\s+STATE`, stdout)
	require.Regexp(t, `(?m)^5\s+r5\s+2024-01-01T00:00:00Z\s+queued\s+1\s+-\s+-\s+-$`, stdout)
	require.True(t, strings.HasSuffix(stdout, "(more: add --cursor c2)\n"), stdout)
	require.NotContains(t, stdout, "see --limit and --offset")

	code, stdout, _ = invoke(t, srv.URL, nil, "runs", "list", "d", "--offset", "3", "--limit", "1")
	require.Equal(t, exitOK, code)
	require.Equal(t, "limit=1&offset=3", query)
	require.Contains(t, stdout, "(4-4 of 9; see --limit and --offset)\n")
}

// A listing without cursors always sends its offset, and -o json prints the whole collection.
func TestListWithoutCursorSendsTheOffsetAndPrintsJSON(t *testing.T) {
	var query string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		query = r.URL.Query().Encode() // sorted by key
		answer(w, http.StatusOK, client.PoolCollection{TotalEntries: 1, Pools: []client.Pool{{Name: "p", Slots: 2}}})
	}))
	defer srv.Close()

	code, stdout, stderr := invoke(t, srv.URL, nil, "pools", "list", "-o", "json")
	require.Equal(t, exitOK, code, stderr)
	require.Equal(t, "limit=50&offset=0", query)
	var got client.PoolCollection
	require.NoError(t, json.Unmarshal([]byte(stdout), &got), stdout)
	require.Equal(t, "p", got.Pools[0].Name)
	require.EqualValues(t, 1, got.TotalEntries)
	require.NotContains(t, stdout, "NAME", "a table in JSON output")
}
