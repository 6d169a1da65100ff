package main

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// claimResult is P4: one measurement per worker count on each side.
type claimResult struct {
	workers        []int
	service, floor []loadResult
	cpu            claimCPUResult // the target: CPU per cycle against the floor handlers
}

// scenarioClaims is P4: workers that loop claim (limit 1) → report success, over HTTP, on a
// backfill with plenty of queued runs and max_active_runs 1000 (so the cap never binds), and
// the floor's minimal SKIP LOCKED claim and update on the same number of runs in the floor's
// database.
func (b *bench) scenarioClaims(ctx context.Context) (claimResult, error) {
	res := claimResult{workers: b.cfg.workers}
	// Generic workers claim without a dag_id, oldest backfill first: pause the backfills the
	// earlier scenarios left active, so that every claim lands on this scenario's backfill.
	if err := b.pauseActive(ctx); err != nil {
		return res, err
	}
	w := newWindow("p4_claims", b.cfg.claimRuns)
	if _, _, err := b.serviceCreate(ctx, w, 1000); err != nil {
		return res, err
	}
	_, floorID, err := b.floorCreate(ctx, w, 1000)
	if err != nil {
		return res, err
	}
	// Both databases were just loaded; autovacuum would analyze them within a minute or so.
	// Do it now on both sides, or a side may be measured with a plan made for empty tables.
	for _, db := range []*sql.DB{b.svcDB, b.floor} {
		if _, err := db.ExecContext(ctx, `ANALYZE`); err != nil {
			return res, fmt.Errorf("analyze: %w", err)
		}
	}
	if res.cpu, err = b.scenarioClaimCPU(ctx, b.floorSrv, b.svcDBName, b.floorDBName, floorID); err != nil {
		return res, fmt.Errorf("CPU: %w", err)
	}
	fc, err := newFloorClaimer(ctx, b.floor, floorID)
	if err != nil {
		return res, err
	}
	defer fc.Close()

	service := func(ctx context.Context, worker int) error { return b.claimCycle(ctx, "w"+strconv.Itoa(worker)) }
	floor := func(ctx context.Context, worker int) error { return fc.cycle(ctx, "w"+strconv.Itoa(worker)) }
	// One-second slices, the sides alternating (and the side that opens alternating too), so
	// that drift in a shared machine falls on both alike.
	const slice = time.Second
	slices := max(1, int(b.cfg.loadDuration/slice))
	for _, workers := range b.cfg.workers {
		var svcRes, floorRes loadResult
		for i := range 2 * slices {
			var r loadResult
			var err error
			if svcTurn := (i%2 == 0) == (i/2%2 == 0); svcTurn {
				r, err = closedLoop(ctx, workers, slice, service)
				svcRes = svcRes.merge(r)
			} else {
				r, err = closedLoop(ctx, workers, slice, floor)
				floorRes = floorRes.merge(r)
			}
			if err != nil {
				return res, fmt.Errorf("%d workers: %w", workers, err)
			}
		}
		res.service = append(res.service, svcRes)
		res.floor = append(res.floor, floorRes)
		b.log.Printf("P4 %2d workers: service %6.0f cycles/s, floor %6.0f cycles/s", workers,
			svcRes.perSecond(), floorRes.perSecond())
	}
	return res, nil
}

// claimCycle is one worker's turn: claim one run, report it successful under its lease.
func (b *bench) claimCycle(ctx context.Context, worker string) error {
	var out struct {
		Runs []struct {
			DagID string `json:"dag_id"`
			RunID string `json:"run_id"`
		} `json:"runs"`
	}
	// A claim skips a backfill that another claim holds at that instant, so with every worker
	// on one backfill some claims come back empty; a worker asks again at once, and the empty
	// claims are part of what a cycle costs. Only a run of empty answers means no work is left.
	const maxEmptyClaims = 1000
	for empty := 0; len(out.Runs) == 0; empty++ {
		if empty == maxEmptyClaims {
			return fmt.Errorf("claim by %s returned no run %d times in a row (too few queued runs for the duration?)", worker, empty)
		}
		err := call(ctx, b.client, http.MethodPost, b.url("/runs/claim"),
			map[string]any{"worker_id": worker, "limit": 1}, http.StatusOK, &out)
		if err != nil {
			return err
		}
	}
	if len(out.Runs) != 1 {
		return fmt.Errorf("claim by %s of limit 1 returned %d runs", worker, len(out.Runs))
	}
	r := out.Runs[0]
	return call(ctx, b.client, http.MethodPatch, b.url("/dags/"+r.DagID+"/runs/"+r.RunID),
		map[string]any{"state": "success", "worker_id": worker}, http.StatusOK, nil)
}

// pauseActive pauses every active backfill of the service.
func (b *bench) pauseActive(ctx context.Context) error {
	var list struct {
		Backfills []backfillOut `json:"backfills"`
	}
	if err := call(ctx, b.client, http.MethodGet, b.url("/backfills?active=true&limit=1000"), nil, http.StatusOK, &list); err != nil {
		return err
	}
	for _, bf := range list.Backfills {
		if bf.State != "running" {
			continue
		}
		if err := call(ctx, b.client, http.MethodPut, b.url("/backfills/"+strconv.FormatInt(bf.ID, 10)+"/pause"), nil, http.StatusOK, nil); err != nil {
			return err
		}
	}
	return nil
}
