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

// dryRunServer answers every dry run with a plan of n daily slots, the last two skipped.
func dryRunServer(t *testing.T, n int) *httptest.Server {
	t.Helper()
	var plan client.DryRunCollection
	skipped := "already exists"
	for i := range n {
		e := client.DryRunEntry{SortOrdinal: int32(i + 1), Action: client.DryRunActionCreate,
			LogicalDate: time.Date(2024, 3, 1+i, 0, 0, 0, 0, time.UTC)}
		if i >= n-2 {
			e.Action, e.ExceptionReason = client.DryRunActionSkip, &skipped
		}
		plan.Runs = append(plan.Runs, e)
	}
	plan.TotalEntries, plan.PlanHash = int64(n), "abc123"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		require.Equal(t, "/api/v1/backfills/dry_run", r.URL.Path)
		answer(w, http.StatusOK, plan)
	}))
	t.Cleanup(srv.Close)
	return srv
}

var dryRunArgs = []string{"backfills", "dry-run", "--dag-id", "d", "--from-date", "2024-03-01", "--to-date", "2024-03-30"}

func TestDryRunSummaryPrintsCountsAndFirstAndLastSlotOnly(t *testing.T) {
	srv := dryRunServer(t, 30)
	code, stdout, stderr := invoke(t, srv.URL, nil, append(dryRunArgs, "--summary")...)
	require.Equal(t, exitOK, code, stderr)
	require.Equal(t, "30 slots: 28 create, 0 reprocess, 2 skip (nothing was written)\n"+
		"first slot #1 2024-03-01T00:00:00Z (create), last slot #30 2024-03-30T00:00:00Z (skip)\n"+
		"plan hash abc123 (create exactly this plan with --if-match abc123)\n", stdout)

	code, stdout, _ = invoke(t, srv.URL, nil, append([]string{"-o", "json"}, append(dryRunArgs, "--summary")...)...)
	require.Equal(t, exitOK, code)
	var sum dryRunSummary
	require.NoError(t, json.Unmarshal([]byte(stdout), &sum))
	require.EqualValues(t, 30, sum.TotalEntries)
	require.Equal(t, 28, sum.Actions[client.DryRunActionCreate])
	require.EqualValues(t, 30, sum.Last.SortOrdinal)
}

func TestDryRunLimitPrintsThatManySlotsAndCountsTheWholePlan(t *testing.T) {
	srv := dryRunServer(t, 30)
	code, stdout, stderr := invoke(t, srv.URL, nil, append(dryRunArgs, "--limit", "5")...)
	require.Equal(t, exitOK, code, stderr)
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	require.Equal(t, "SORT_ORDINAL", strings.Fields(lines[0])[0])
	require.Equal(t, "5", strings.Fields(lines[5])[0], "five slots after the header")
	require.Equal(t, "... and 25 more slots (--limit 0 prints them all)", lines[6])
	require.Equal(t, "30 slots: 28 create, 0 reprocess, 2 skip (nothing was written)", lines[7])

	code, _, stderr = invoke(t, srv.URL, nil, append(dryRunArgs, "--limit", "-1")...)
	require.Equal(t, exitError, code)
	require.Contains(t, stderr, "--limit must be 0")
}

func TestDryRunPrintsTheEstimate(t *testing.T) {
	plan := client.DryRunCollection{PlanHash: "abc123", EstimateBasis: client.DryRunCollectionEstimateBasisLastSuccessfulRuns,
		Estimate: &client.BackfillEstimate{Runs: 10, P50RunSeconds: 1, SampleRuns: 3, Concurrency: 2, RunnerSeconds: 10, WallClockSeconds: 5}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { answer(w, http.StatusOK, plan) }))
	t.Cleanup(srv.Close)
	code, stdout, stderr := invoke(t, srv.URL, nil, append(dryRunArgs, "--summary")...)
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stdout, "estimate: 10 runner-seconds, 5 wall clock at 2 at once (p50 1s of the last 3 successful runs)\n")

	plan.Estimate, plan.EstimateBasis = nil, client.DryRunCollectionEstimateBasisNoSuccessfulRuns
	_, stdout, _ = invoke(t, srv.URL, nil, append(dryRunArgs, "--summary")...)
	require.Contains(t, stdout, "estimate: none (no_successful_runs)\n")
}
