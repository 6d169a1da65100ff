package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/backfillsvc/backfill/repo"
)

// bulkSize is one size of P6 in one run, the medians of its rounds: the creation and the
// cancel of one backfill, and the creation of another whose runs then fail and the backfill
// that reprocesses them.
type bulkSize struct {
	n                       int
	rounds                  int
	create, cancel          time.Duration
	createFailed, reprocess time.Duration
}

func (s bulkSize) cancelRatio() float64    { return float64(s.cancel) / float64(s.create) }
func (s bulkSize) reprocessRatio() float64 { return float64(s.reprocess) / float64(s.createFailed) }

// bulkMedians folds rounds into one bulkSize of medians.
func bulkMedians(rounds []bulkSize) bulkSize {
	pick := func(f func(bulkSize) time.Duration) time.Duration {
		var ds []time.Duration
		for _, r := range rounds {
			ds = append(ds, f(r))
		}
		return median(ds)
	}
	return bulkSize{
		n: rounds[0].n, rounds: len(rounds),
		create:       pick(func(s bulkSize) time.Duration { return s.create }),
		cancel:       pick(func(s bulkSize) time.Duration { return s.cancel }),
		createFailed: pick(func(s bulkSize) time.Duration { return s.createFailed }),
		reprocess:    pick(func(s bulkSize) time.Duration { return s.reprocess }),
	}
}

// bulkResult is P6: the same scenario run twice on the same server, so that the second run
// meets connections every earlier statement has warmed.
type bulkResult struct {
	runs [][]bulkSize // [run][size], sizes ascending
}

// scenarioBulk is P6. Each run, for each size N, rounds (the median is reported) of: a fresh
// DAG, the timed POST of its N-run backfill, then the timed PUT cancel (which must answer
// canceled with N canceled runs); and a second fresh DAG, the timed POST of its backfill,
// every run set to failed and the backfill finalized (not timed), then the timed POST of the
// same window with reprocess_behavior failed (which must take all N runs over). Before the
// first run every connection of the service's pool has run the counter trigger on zero rows,
// the way a service's sweep does first.
func (b *bench) scenarioBulk(ctx context.Context) (bulkResult, error) {
	var res bulkResult
	if err := b.warmPool(ctx); err != nil {
		return res, err
	}
	// The finalization between the failed runs and their reprocess is the service's own
	// sweep step, run in-process on the service's database (the service's sweep is an hour
	// away).
	store := repo.New(sqlx.NewDb(b.svcDB, "postgres"), repo.Config{})
	for run := range 2 {
		var sizes []bulkSize
		for _, n := range b.cfg.bulkSizes {
			var rounds []bulkSize
			for r := range b.cfg.bulkRounds {
				s, err := b.bulkOnce(ctx, store, fmt.Sprintf("%d_%d_%d", n, run, r), n)
				if err != nil {
					return res, fmt.Errorf("run %d, %d runs: %w", run+1, n, err)
				}
				b.log.Printf("P6 run %d %6d runs round %d: create %v cancel %v (%.2f×); create %v reprocess failed %v (%.2f×)",
					run+1, n, r+1, s.create.Round(time.Millisecond), s.cancel.Round(time.Millisecond), s.cancelRatio(),
					s.createFailed.Round(time.Millisecond), s.reprocess.Round(time.Millisecond), s.reprocessRatio())
				rounds = append(rounds, s)
			}
			sizes = append(sizes, bulkMedians(rounds))
		}
		res.runs = append(res.runs, sizes)
	}
	return res, nil
}

// bulkOut is the part of a backfill answer P6 checks.
type bulkOut struct {
	State    string `json:"state"`
	Progress struct {
		Total, Queued, Canceled int
	} `json:"progress"`
}

func (b *bench) bulkOnce(ctx context.Context, store *repo.Store, tag string, n int) (bulkSize, error) {
	s := bulkSize{n: n}
	var err error
	var id int64
	w := newWindow("p6_cancel_"+tag, n)
	if s.create, id, err = b.serviceCreate(ctx, w, 10); err != nil {
		return s, err
	}
	b.checkpoint(ctx)
	var out bulkOut
	start := time.Now()
	err = call(ctx, b.client, http.MethodPut, b.url(fmt.Sprintf("/backfills/%d/cancel", id)), nil, http.StatusOK, &out)
	s.cancel = time.Since(start)
	if err != nil {
		return s, err
	}
	if out.State != "canceled" || out.Progress.Canceled != n {
		return s, fmt.Errorf("cancel of backfill %d: state %s, %d canceled, want canceled and %d", id, out.State, out.Progress.Canceled, n)
	}

	w = newWindow("p6_reprocess_"+tag, n)
	if s.createFailed, id, err = b.serviceCreate(ctx, w, 10); err != nil {
		return s, err
	}
	if _, err := b.svcDB.ExecContext(ctx, `
		UPDATE dag_runs SET state = 'failed', start_date = now(), end_date = now() WHERE backfill_id = $1`, id); err != nil {
		return s, fmt.Errorf("fail the runs of backfill %d: %w", id, err)
	}
	if _, err := store.SweepFinalize(ctx, 1000); err != nil {
		return s, err
	}
	b.checkpoint(ctx)
	start = time.Now()
	err = call(ctx, b.client, http.MethodPost, b.url("/backfills"), map[string]any{
		"dag_id":             w.dagID,
		"from_date":          w.from().Format(time.RFC3339),
		"to_date":            w.to.Format(time.RFC3339),
		"max_active_runs":    10,
		"reprocess_behavior": "failed",
	}, http.StatusCreated, &out)
	s.reprocess = time.Since(start)
	if err != nil {
		return s, err
	}
	if out.Progress.Total != n || out.Progress.Queued != n {
		return s, fmt.Errorf("reprocess of %s: progress total %d queued %d, want %d", w.dagID, out.Progress.Total, out.Progress.Queued, n)
	}
	return s, nil
}

// warmPool makes every pooled connection of the service run the counter trigger on zero rows
// before anything else large: many concurrent heartbeats for a run nobody holds (each an
// UPDATE of dag_runs that matches nothing; the answer is 404 or 409). That is the first plan
// PL/pgSQL would cache, the one that once made a 15,000-run cancel quadratic.
func (b *bench) warmPool(ctx context.Context) error {
	const clients, each = 64, 10
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for range clients {
		wg.Go(func() {
			for range each {
				if err := b.heartbeatNobody(ctx); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// heartbeatNobody sends one such heartbeat. A 503 busy is admission control shedding it (the
// 64 clients can outrun the executor class's admission on a loaded machine, as in CI's smoke
// run): it never reached the database, so it is sent again.
func (b *bench) heartbeatNobody(ctx context.Context) error {
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, b.url("/runs/1/heartbeat"),
			strings.NewReader(`{"worker_id": "p6_nobody"}`))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := b.client.Do(req)
		if err != nil {
			return err
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		switch {
		case resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusConflict:
			return nil
		case resp.StatusCode == http.StatusServiceUnavailable && strings.Contains(string(body), `"code":"busy"`):
			continue
		}
		return fmt.Errorf("heartbeat of a run nobody holds: status %d, want 404 or 409: %s", resp.StatusCode, body)
	}
}

// Targets of the bulk changes (P6).
const (
	targetBulkVsCreate = 2.0  // cancel and reprocess ≤ 2 × the creation of the same backfill at the largest N
	targetBulkGrowth   = 12.0 // t(100k) ≤ 12 × t(10k): linear is 10
)

func bulkRows(r bulkResult) []row {
	var rows []row
	for run, sizes := range r.runs {
		which := fmt.Sprintf("run %d", run+1)
		if run > 0 {
			which += ", warm"
		}
		last := len(sizes) - 1
		for i, s := range sizes {
			for _, op := range []struct {
				name          string
				took, created time.Duration
			}{{"cancel", s.cancel, s.create}, {"reprocess failed", s.reprocess, s.createFailed}} {
				ratio := float64(op.took) / float64(op.created)
				rw := row{fmt.Sprintf("P6 %s, %s runs, vs its creation (%s, median of %d)", op.name, count(s.n), which, s.rounds),
					dur(op.took), dur(op.created), ratioStr(ratio), "—", "—"}
				if i == last {
					rw.target, rw.result = fmt.Sprintf("≤ %.1f", targetBulkVsCreate), verdict(ratio <= targetBulkVsCreate)
				}
				rows = append(rows, rw)
			}
		}
		if last < 1 {
			continue
		}
		a, b := sizes[last-1], sizes[last]
		for _, op := range []struct {
			name       string
			small, big time.Duration
		}{{"cancel", a.cancel, b.cancel}, {"reprocess failed", a.reprocess, b.reprocess}, {"creation", a.create, b.create}} {
			growth := float64(op.big) / float64(op.small)
			rw := row{fmt.Sprintf("P6 %s growth %s→%s runs (%s)", op.name, count(a.n), count(b.n), which),
				dur(op.big), dur(op.small), ratioStr(growth),
				fmt.Sprintf("≤ %.0f× (linear %d×)", targetBulkGrowth, b.n/a.n), verdict(growth <= targetBulkGrowth)}
			if op.name == "creation" {
				// The creation's own growth in the same rounds: no target here (P1 has one), it
				// shows how much of the others' growth the machine's noise explains.
				rw.target, rw.result = "—", "—"
			}
			rows = append(rows, rw)
		}
	}
	return rows
}
