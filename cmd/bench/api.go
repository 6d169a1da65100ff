package main

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"net/http"
	"time"
)

// bench is one run: the service under test, the floor's database, and the client.
type bench struct {
	cfg    config
	log    *log.Logger
	svc    *service
	svcDSN string // the service's database
	client *http.Client
	floor  *sql.DB // the floor's database (same migrations, separate data)
	// triggerCounts: the schema counts runs by an INSERT trigger (see insertTriggerCounts).
	triggerCounts bool
	noCheckpoint  bool    // CHECKPOINT was refused once; do not ask again
	svcDB         *sql.DB // the service's own database, for the floor of P2
	// floorSrv runs the floor handlers of the CPU measures; the databases' names pick the
	// PostgreSQL backends whose CPU each side is charged.
	floorSrv               *floorServer
	svcDBName, floorDBName string
}

func (b *bench) url(path string) string { return b.svc.base + "/api/v1" + path }

// putDag creates a minutely DAG: one slot per minute makes N slots a window of N minutes.
func (b *bench) putDag(ctx context.Context, dagID string) error {
	return call(ctx, b.client, http.MethodPut, b.url("/dags/"+dagID),
		map[string]any{"schedule": "* * * * *"}, http.StatusCreated, nil)
}

// backfillOut is the part of a backfill answer the benchmarks check.
type backfillOut struct {
	ID       int64  `json:"id"`
	State    string `json:"state"`
	Progress struct {
		Total  int `json:"total"`
		Queued int `json:"queued"`
	} `json:"progress"`
}

// createBackfill POSTs the window's backfill and checks that every slot became a queued run.
func (b *bench) createBackfill(ctx context.Context, w window, maxActive int) (backfillOut, error) {
	var out backfillOut
	err := call(ctx, b.client, http.MethodPost, b.url("/backfills"), map[string]any{
		"dag_id":          w.dagID,
		"from_date":       w.from().Format(time.RFC3339),
		"to_date":         w.to.Format(time.RFC3339),
		"max_active_runs": maxActive,
	}, http.StatusCreated, &out)
	if err != nil {
		return out, err
	}
	if out.Progress.Total != w.n || out.Progress.Queued != w.n {
		return out, fmt.Errorf("backfill %d of %s: progress total %d queued %d, want %d",
			out.ID, w.dagID, out.Progress.Total, out.Progress.Queued, w.n)
	}
	return out, nil
}

// checkpoint flushes the dirty pages the previous creation left in shared buffers, so that
// each timed creation starts from the same clean state instead of paying for writing out
// the pages of the one before it (which, with rounds alternating, would be the other side's).
// It needs superuser (or pg_checkpoint); without it the rounds run without.
//
// First it waits (up to a minute) for autovacuum workers to finish: the scenarios leave
// 100,000 dead rows behind at a time (a cancel, a takeover), and on 2 cores a timed operation
// that shares them with autovacuum measures the machine, not the operation (P6's 100k
// creations took 2.2-2.3 s beside autovacuum against 1.5 s without).
func (b *bench) checkpoint(ctx context.Context) {
	b.awaitAutovacuum(ctx)
	if b.noCheckpoint {
		return
	}
	if _, err := b.floor.ExecContext(ctx, `CHECKPOINT`); err != nil {
		b.log.Printf("CHECKPOINT refused (%v): creation rounds run without one", err)
		b.noCheckpoint = true
	}
}

// awaitAutovacuum waits until no autovacuum worker runs on the server, at most a minute.
func (b *bench) awaitAutovacuum(ctx context.Context) {
	start := time.Now()
	for time.Since(start) < time.Minute {
		var n int
		err := b.floor.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'autovacuum worker'`).Scan(&n)
		if err != nil || n == 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if waited := time.Since(start); waited >= 100*time.Millisecond {
		b.log.Printf("waited %v for autovacuum to finish", waited.Round(100*time.Millisecond))
	}
}

// serviceCreate creates a fresh DAG (not timed) and times the POST of its backfill.
func (b *bench) serviceCreate(ctx context.Context, w window, maxActive int) (time.Duration, int64, error) {
	if err := b.putDag(ctx, w.dagID); err != nil {
		return 0, 0, err
	}
	b.checkpoint(ctx)
	start := time.Now()
	out, err := b.createBackfill(ctx, w, maxActive)
	return time.Since(start), out.ID, err
}

// floorCreate inserts the DAG (not timed) and times the COPY transaction.
func (b *bench) floorCreate(ctx context.Context, w window, maxActive int) (time.Duration, int64, error) {
	if err := floorDag(ctx, b.floor, w.dagID); err != nil {
		return 0, 0, err
	}
	b.checkpoint(ctx)
	start := time.Now()
	id, err := copyCreate(ctx, b.floor, w, maxActive, b.triggerCounts)
	return time.Since(start), id, err
}

// rowByRow inserts the DAG (not timed) and times the row-by-row transaction.
func (b *bench) rowByRow(ctx context.Context, w window) (time.Duration, error) {
	if err := floorDag(ctx, b.floor, w.dagID); err != nil {
		return 0, err
	}
	b.checkpoint(ctx)
	start := time.Now()
	err := rowByRowCreate(ctx, b.floor, w, 10, b.triggerCounts)
	return time.Since(start), err
}

// warmUp sends each path a little work first, so that no measurement pays for the first
// connection, the first plan, or lazily built caches on either side.
func (b *bench) warmUp(ctx context.Context) error {
	for i := range 3 {
		w := newWindow(fmt.Sprintf("warm_%d", i), 500)
		if _, _, err := b.serviceCreate(ctx, w, 10); err != nil {
			return err
		}
		if _, _, err := b.floorCreate(ctx, w, 10); err != nil {
			return err
		}
		if _, err := b.rowByRow(ctx, newWindow(fmt.Sprintf("warm_rbr_%d", i), 100)); err != nil {
			return err
		}
	}
	return nil
}
