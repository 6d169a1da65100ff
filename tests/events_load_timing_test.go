package tests

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/handlers"
	"github.com/stretchr/testify/require"
)

// timedLoop sends one request after another until stop is closed and records each answer's
// time, which must be 200.
func timedLoop(e *env, stop <-chan struct{}, send func() (*http.Response, error)) ([]time.Duration, error) {
	var lats []time.Duration
	for {
		select {
		case <-stop:
			return lats, nil
		default:
		}
		start := time.Now()
		res, err := send()
		if err != nil {
			return lats, err
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			return lats, fmt.Errorf("%s %s: %d %s", res.Request.Method, res.Request.URL.Path, res.StatusCode, body)
		}
		lats = append(lats, time.Since(start))
	}
}

// p99 of latencies (sorted in place).
func p99(lats []time.Duration) time.Duration {
	slices.Sort(lats)
	return lats[len(lats)*99/100]
}

// statusAndClaimLatencies runs a status reader and a claimer (each claim's run released
// again, so that there is always one to claim) for d, and answers their answer times.
func statusAndClaimLatencies(t *testing.T, e *env, backfillID int64, d time.Duration) (status, claims []time.Duration) {
	t.Helper()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var statusErr, claimErr error
	wg.Go(func() {
		status, statusErr = timedLoop(e, stop, func() (*http.Response, error) {
			return e.HTTP.Get(e.URL + backfillPath(backfillID))
		})
	})
	wg.Go(func() {
		claims, claimErr = timedLoop(e, stop, func() (*http.Response, error) {
			res, err := e.HTTP.Post(e.URL+claimPath, "application/json", strings.NewReader(`{"worker_id":"timing","limit":1}`))
			if err != nil || res.StatusCode != http.StatusOK {
				return res, err
			}
			body, err := io.ReadAll(res.Body)
			res.Body.Close()
			if err != nil {
				return nil, err
			}
			var c struct {
				Runs []struct {
					ID int64 `json:"id"`
				} `json:"runs"`
			}
			if err := json.Unmarshal(body, &c); err != nil || len(c.Runs) != 1 {
				return nil, fmt.Errorf("claim: %s (%v)", body, err)
			}
			res.Body = io.NopCloser(bytes.NewReader(body))
			rel, err := e.HTTP.Post(fmt.Sprintf("%s/api/v1/runs/%d/release", e.URL, c.Runs[0].ID), "application/json", strings.NewReader(`{"worker_id":"timing"}`))
			if err == nil {
				_, _ = io.Copy(io.Discard, rel.Body)
				rel.Body.Close()
			}
			return res, err
		})
	})
	time.Sleep(d)
	close(stop)
	wg.Wait()
	require.NoError(t, statusErr)
	require.NoError(t, claimErr)
	require.NotEmpty(t, status)
	require.NotEmpty(t, claims)
	return status, claims
}

// openStream opens a Server-Sent Events stream and counts the events it receives until ctx
// ends.
func openStream(t *testing.T, ctx context.Context, e *env, path, lastEventID string, got *atomic.Int64) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.URL+path, nil)
	require.NoError(t, err)
	req.Header.Set("Accept", "text/event-stream")
	if lastEventID != "" {
		req.Header.Set("Last-Event-ID", lastEventID)
	}
	res, err := e.HTTP.Do(req)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode)
	go func() {
		defer res.Body.Close()
		sc := bufio.NewScanner(res.Body)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "id:") {
				got.Add(1)
			}
		}
	}()
}

// With a million events in the outbox, 24 streams of an old backfill's events (resumed after
// its last one: every row after it is looked at, none kept), 24 streams of a rare type and a
// loop of GET /events?dag_id=nosuchdag leave status reads and claims within twice their idle
// 99th percentile, in rounds that alternate idle and loaded. Before reads of the outbox were bounded, 24 such streams took status reads
// from 1.2–1.8 ms to 0.9–2.1 s: each re-read the outbox from its last match every 250 ms.
// When the streams' clients leave, no read of theirs runs on.
func TestEventReadersAtAMillionEventsLeaveStatusReadsAndClaimsAlone(t *testing.T) {
	requireTimingRun(t)
	e := newEnv(t, withAdmission(handlers.Admission{MaxInFlight: 18}))
	old := e.DailyBackfill("old", day(1, 1), day(1, 3))
	var oldLast int64
	require.NoError(t, e.DB.Get(&oldLast, `SELECT max(id) FROM events WHERE backfill_id = $1`, old.Id))
	e.DailyBackfill("work", day(1, 1), day(1, 10), "max_active_runs", 100) // what the claims claim
	start := time.Now()
	fillOutbox(t, e.DB, 1_000_000)
	// The fixture's aftermath (hint bits, the visibility map, the bloom index's summaries of
	// the million rows, a checkpoint) is not the load under test: settled first, then the idle
	// figures after a warm-up. The table, not the events view: VACUUM skips a view with a
	// warning, and unsummarized, each old-backfill stream's first read walked every row (190 ms).
	e.DB.MustExec(`VACUUM ANALYZE outbox`)
	e.DB.MustExec(`CHECKPOINT`)
	t.Logf("outbox: 1,000,000 events in %s", time.Since(start).Round(time.Millisecond))
	statusAndClaimLatencies(t, e, old.Id, 2*time.Second) // warm-up

	// Rounds alternate, idle then loaded, so that the other work of a shared machine falls
	// on both alike. Each loaded round opens the streams afresh: their catch-up (every one
	// walks the million rows once) is part of the load, as is their quiet following after.
	const rounds = 3
	var statusIdle, claimsIdle, statusLoaded, claimsLoaded []time.Duration
	var oldGot, rareGot atomic.Int64
	for range rounds {
		st, cl := statusAndClaimLatencies(t, e, old.Id, 5*time.Second)
		statusIdle, claimsIdle = append(statusIdle, st...), append(claimsIdle, cl...)

		ctx, cancel := context.WithCancel(context.Background())
		for range 24 {
			openStream(t, ctx, e, fmt.Sprintf("/api/v1/events?backfill_id=%d", old.Id), fmt.Sprint(oldLast), &oldGot)
			openStream(t, ctx, e, "/api/v1/events?type=backfill.failed", "", &rareGot)
		}
		stopPages := make(chan struct{})
		pages := make(chan error, 1)
		go func() {
			_, err := timedLoop(e, stopPages, func() (*http.Response, error) {
				return e.HTTP.Get(e.URL + "/api/v1/events?dag_id=nosuchdag")
			})
			pages <- err
		}()
		st, cl = statusAndClaimLatencies(t, e, old.Id, 10*time.Second)
		statusLoaded, claimsLoaded = append(statusLoaded, st...), append(claimsLoaded, cl...)
		close(stopPages)
		require.NoError(t, <-pages)

		// The clients leave: within a second no statement of theirs is left running.
		cancel()
		require.Eventually(t, func() bool {
			return e.Count(`SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query LIKE '%events_scan%' AND pid <> pg_backend_pid()`) == 0
		}, time.Second, 10*time.Millisecond, "stream reads left running after their clients went")
	}

	t.Logf("status reads: idle p99 %s (%d), loaded p99 %s (%d)", p99(statusIdle), len(statusIdle), p99(statusLoaded), len(statusLoaded))
	t.Logf("claims: idle p99 %s (%d), loaded p99 %s (%d)", p99(claimsIdle), len(claimsIdle), p99(claimsLoaded), len(claimsLoaded))
	t.Logf("streams received: old backfill %d, rare type %d (10 a stream once caught up, %d streams)", oldGot.Load(), rareGot.Load(), 24*rounds)

	require.LessOrEqual(t, p99(statusLoaded), 2*p99(statusIdle), "status reads' p99 beside the event readers")
	require.LessOrEqual(t, p99(claimsLoaded), 2*p99(claimsIdle), "claims' p99 beside the event readers")
}
