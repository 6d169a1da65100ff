package tests

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/api"
	"github.com/backfillsvc/backfill/handlers"
	"github.com/backfillsvc/backfill/metrics"
	"github.com/backfillsvc/backfill/repo"
	"github.com/backfillsvc/backfill/sweeper"
	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"
)

// replicaOf starts a second service instance over e's database, as another process would: its
// own connection pool, store, sweeper and HTTP server. It shares only the database (and so the
// database's clock, which is what e.Clock moves).
func replicaOf(t *testing.T, e *env) *env {
	t.Helper()
	db, err := sqlx.Open("postgres", e.DSN)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	m := metrics.New()
	claimWaker := startClaimWaker(t, db, e.DSN, slog.New(slog.DiscardHandler))
	store := repo.New(db, repo.Config{Observer: m, OnClaimable: claimWaker.Kick})
	h, err := handlers.New(handlers.Options{
		ClaimWaker: claimWaker,
		Store:      store,
		Logger:     slog.New(slog.DiscardHandler),
		Ready:      func(ctx context.Context) error { return store.Ping(ctx) },
		Metrics:    m.Handler(),
		Instrument: m.Instrument,
	})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &env{
		t: t, DB: db, DSN: e.DSN, Store: store, Clock: e.Clock,
		Sweep: sweeper.New(store, sweeper.Config{Batch: 100}),
		URL:   srv.URL, HTTP: srv.Client(),
	}
}

// clockRow is what the database recorded for a run, read directly.
type clockRow struct {
	State          string     `db:"state"`
	Attempt        int        `db:"attempt"`
	QueuedAt       *time.Time `db:"queued_at"`
	StartDate      *time.Time `db:"start_date"`
	EndDate        *time.Time `db:"end_date"`
	LeaseExpiresAt *time.Time `db:"lease_expires_at"`
}

func clockRunRow(t *testing.T, e *env, id int64) clockRow {
	t.Helper()
	var r clockRow
	require.NoError(t, e.DB.Get(&r, `
		SELECT state, attempt, queued_at, start_date, end_date, lease_expires_at FROM dag_runs WHERE id = $1`, id))
	return r
}

// Two replicas over one database whose clock is 10 minutes behind theirs: every timestamp and
// every lease decision is the database's, so neither replica expires a lease early, a heartbeat
// through the other replica extends the lease from the database's now, and the lease ends when
// the database's clock passes it, not the replicas'.
func TestLeasesFollowTheDatabaseClockAcrossReplicas(t *testing.T) {
	t.Parallel()
	a := newEnv(t)
	b := replicaOf(t, a)
	a.Clock.mu.Lock()
	a.Clock.set(time.Now().UTC().Add(-10 * time.Minute).Truncate(time.Second))
	a.Clock.mu.Unlock()

	const dag = "clock_replicas"
	a.PutDag(dag, "@daily", "")
	t0 := a.Clock.Now()
	bf := a.CreateBackfill(backfillBody(dag, day(1, 1), day(1, 3), "max_active_runs", 2))
	requireInstant(t, t0, &bf.CreatedAt, "backfill created_at")
	var stored struct {
		CreatedAt time.Time `db:"created_at"`
		UpdatedAt time.Time `db:"updated_at"`
	}
	require.NoError(t, a.DB.Get(&stored, `SELECT created_at, updated_at FROM backfills WHERE id = $1`, bf.Id))
	requireInstant(t, t0, &stored.CreatedAt, "stored created_at")
	requireInstant(t, t0, &stored.UpdatedAt, "stored updated_at")

	// Replica A hands out a run with a 60 s lease.
	a.Clock.Advance(5 * time.Second)
	t1 := a.Clock.Now()
	runs := a.ClaimWith(map[string]any{"worker_id": "w1", "limit": 1, "lease_seconds": 60})
	require.Len(t, runs, 1)
	run := runs[0]
	requireInstant(t, t1, run.StartDate, "start_date")
	requireInstant(t, t1.Add(60*time.Second), run.LeaseExpiresAt, "lease_expires_at")
	requireInstant(t, t0, run.QueuedAt, "queued_at")
	row := clockRunRow(t, a, run.Id)
	requireInstant(t, t1, row.StartDate, "stored start_date")
	requireInstant(t, t1.Add(60*time.Second), row.LeaseExpiresAt, "stored lease_expires_at")
	requireInstant(t, t0, row.QueuedAt, "stored queued_at")
	// The premise: by the replicas' own clock this lease ended minutes ago.
	require.True(t, time.Now().After(row.LeaseExpiresAt.Add(5*time.Minute)), "process clock is minutes ahead")

	// Replica B's sweep leaves it alone; B's heartbeat extends it from the database's now.
	b.SweepOnce()
	require.Equal(t, "running", clockRunRow(t, b, run.Id).State)
	b.Clock.Advance(50 * time.Second)
	res := b.Heartbeat(run.Id, "w1")
	require.Equal(t, http.StatusOK, res.Status, "body: %s", res.Body)
	var hb api.HeartbeatResponse
	res.Decode(t, &hb)
	lease := t1.Add(50*time.Second + 60*time.Second)
	requireInstant(t, lease, &hb.LeaseExpiresAt, "heartbeat lease_expires_at")
	requireInstant(t, lease, clockRunRow(t, b, run.Id).LeaseExpiresAt, "stored lease after heartbeat")

	// One second before the extended lease ends, neither replica's sweep expires it.
	b.Clock.Advance(lease.Sub(b.Clock.Now()) - time.Second)
	b.SweepOnce()
	a.SweepOnce()
	got := clockRunRow(t, b, run.Id)
	require.Equal(t, "running", got.State)
	require.Equal(t, 1, got.Attempt)

	// Once the database's clock passes the lease, it is over everywhere: B refuses the
	// heartbeat and B's sweep puts the run back for another attempt.
	b.Clock.Advance(2 * time.Second)
	requireProblem(t, b.Heartbeat(run.Id, "w1"), http.StatusConflict, "lease_lost")
	b.SweepOnce()
	got = clockRunRow(t, b, run.Id)
	require.Equal(t, "queued", got.State)
	require.Equal(t, 2, got.Attempt)
	require.Nil(t, got.LeaseExpiresAt)
	requireInstant(t, b.Clock.Now(), got.QueuedAt, "queued_at of the new attempt")

	// A run claimed through B and reported through A ends at the database's now too.
	runs = b.ClaimWith(map[string]any{"worker_id": "w2", "limit": 1, "lease_seconds": 60})
	require.Len(t, runs, 1)
	a.Clock.Advance(7 * time.Second)
	done := a.Report(runs[0], "success")
	requireInstant(t, a.Clock.Now(), done.EndDate, "end_date")
	requireInstant(t, a.Clock.Now(), clockRunRow(t, a, runs[0].Id).EndDate, "stored end_date")
	checkInvariants(t, a.DB)
}
