package main

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/backfillsvc/backfill/client"
)

// P10: how busy a pool is kept by executors that share it. Two executors (the Go SDK's
// RunExecutor, 3 runs at once each) serve one 3-slot pool whose runs each work 1 s; the busy
// fraction is the pool's running runs over its slots, averaged over the time runs are
// queued (from the backfill's creation to the last run's start), read afterwards from the
// runs' start and end times. Measured twice: with claims that wait on the service
// (wait_seconds, the executors' default) and with claims that poll (the SDK's idle backoff).
const (
	targetPoolBusy = 0.95
	poolBusySlots  = 3
	poolBusyWork   = time.Second
)

type poolBusyResult struct {
	runs             int
	waiting, polling float64
}

func (b *bench) scenarioPoolBusy(ctx context.Context) (poolBusyResult, error) {
	res := poolBusyResult{runs: 30}
	if b.cfg.smoke {
		res.runs = 9
	}
	var err error
	if res.polling, err = b.poolBusyOnce(ctx, "bench_pool_polling", res.runs, -1); err != nil {
		return res, fmt.Errorf("polling: %w", err)
	}
	if res.waiting, err = b.poolBusyOnce(ctx, "bench_pool_waiting", res.runs, 0); err != nil {
		return res, fmt.Errorf("waiting: %w", err)
	}
	b.log.Printf("P10 pool busy fraction: waiting claims %.3f, polling %.3f", res.waiting, res.polling)
	return res, nil
}

// poolBusyOnce runs n hourly runs of a fresh DAG in a fresh 3-slot pool through two
// executors whose claims wait claimWait (the SDK's ExecutorConfig.ClaimWait: 0 its
// default, negative none), and answers the pool's busy fraction.
func (b *bench) poolBusyOnce(ctx context.Context, name string, n int, claimWait time.Duration) (float64, error) {
	if err := call(ctx, b.client, http.MethodPut, b.url("/pools/"+name),
		map[string]any{"slots": poolBusySlots}, http.StatusCreated, nil); err != nil {
		return 0, err
	}
	if err := call(ctx, b.client, http.MethodPut, b.url("/dags/"+name),
		map[string]any{"schedule": "@hourly"}, http.StatusCreated, nil); err != nil {
		return 0, err
	}
	api, err := client.New(b.svc.base, "", client.WithHTTPClient(b.client))
	if err != nil {
		return 0, err
	}
	var (
		wg   sync.WaitGroup
		errs = make([]error, 2)
	)
	xctx, cancel := context.WithTimeout(ctx, time.Duration(n)*poolBusyWork+2*time.Minute)
	defer cancel()
	// The executors start first, idle, as a fleet would be when the backfill arrives.
	started := make(chan struct{})
	for i := range 2 {
		wg.Go(func() {
			<-started
			errs[i] = api.RunExecutor(xctx, client.ExecutorConfig{
				WorkerID: fmt.Sprintf("%s-%d", name, i), Pool: name, Limit: poolBusySlots,
				LeaseSeconds: 60, ClaimWait: claimWait,
			}, func(ctx context.Context, _ client.DagRun) error {
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(poolBusyWork):
					return nil
				}
			})
		})
	}
	close(started)
	time.Sleep(2 * time.Second) // every executor is idle in its claim loop
	from := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	var bf backfillOut
	if err := call(ctx, b.client, http.MethodPost, b.url("/backfills"), map[string]any{
		"dag_id": name, "from_date": from.Format(time.RFC3339),
		"to_date":         from.Add(time.Duration(n-1) * time.Hour).Format(time.RFC3339),
		"max_active_runs": 100, "pool": name,
	}, http.StatusCreated, &bf); err != nil {
		cancel()
		wg.Wait()
		return 0, err
	}
	// Wait for every run to succeed, then stop the executors.
	for {
		var done int
		if err := b.svcDB.QueryRowContext(ctx,
			`SELECT count(*) FROM dag_runs WHERE backfill_id = $1 AND state = 'success'`, bf.ID).Scan(&done); err != nil {
			cancel()
			wg.Wait()
			return 0, err
		}
		if done == n {
			break
		}
		if xctx.Err() != nil {
			wg.Wait()
			return 0, fmt.Errorf("%d of %d runs done when time ran out", done, n)
		}
		time.Sleep(100 * time.Millisecond)
	}
	cancel()
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return 0, err
		}
	}
	return b.poolBusyFraction(ctx, bf.ID)
}

// poolBusyFraction integrates the backfill's running runs (capped at the pool's slots) over
// the time runs were queued: from its creation to its last run's start.
func (b *bench) poolBusyFraction(ctx context.Context, backfillID int64) (float64, error) {
	var busy float64
	err := b.svcDB.QueryRowContext(ctx, `
		WITH span AS (
			SELECT (SELECT created_at FROM backfills WHERE id = $1) AS t0,
			       (SELECT max(start_date) FROM dag_runs WHERE backfill_id = $1) AS t1
		), edges AS (
			SELECT start_date AS at, 1 AS d FROM dag_runs WHERE backfill_id = $1
			UNION ALL
			SELECT end_date, -1 FROM dag_runs WHERE backfill_id = $1
		), steps AS (
			SELECT at, sum(sum(d)) OVER (ORDER BY at) AS running,
			       lead(at) OVER (ORDER BY at) AS next
			FROM edges GROUP BY at
		)
		SELECT coalesce(sum(least(running, $2) * extract(epoch FROM
		           least(next, span.t1) - greatest(at, span.t0))), 0)
		       / ($2 * extract(epoch FROM span.t1 - span.t0))
		FROM steps, span
		WHERE next IS NOT NULL AND next > span.t0 AND at < span.t1
		GROUP BY span.t0, span.t1`, backfillID, poolBusySlots).Scan(&busy)
	if err != nil {
		return 0, fmt.Errorf("busy fraction: %w", err)
	}
	return busy, nil
}

func poolBusyRows(p poolBusyResult) []row {
	return []row{{
		fmt.Sprintf("P10 pool busy fraction, 2 executors × 3 on a 3-slot pool, %d runs of 1 s, waiting claims vs polling", p.runs),
		fmt.Sprintf("%.3f", p.waiting), fmt.Sprintf("%.3f polling", p.polling),
		fmt.Sprintf("%.2f×", p.waiting/p.polling),
		fmt.Sprintf("≥ %.2f", targetPoolBusy), verdict(p.waiting >= targetPoolBusy),
	}}
}
