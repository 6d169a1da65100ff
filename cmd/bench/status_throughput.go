package main

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// statusResult is P2.
type statusResult struct {
	small, large, floor loadResult
	smallRuns           int
	largeRuns           int
	largeID             int64 // the backfill read, also by the CPU measure
	// healthz is GET /healthz from the same clients: the HTTP floor, what the service's
	// server, middleware and this load generator cost per request with no work behind them.
	healthz loadResult
	// shed counts the GETs answered 503 busy and sent again (none on a quiet machine).
	shed int64
	// CPU used per request by the service and by the load generator while the GET of the
	// large backfill ran, and by the load generator while the floor ran (0: not measured).
	svcCPU, genCPU, floorGenCPU time.Duration
}

// scenarioStatus is P2: GET /backfills/{id} from 32 closed-loop clients on a 5-run and on the
// largest backfill of P1, and the floor: the same primary-key SELECT of the backfill row
// through a database/sql pool of 32 connections to the service's database; and the HTTP
// floor: GET /healthz from the same clients. Each is measured in slices, interleaved.
func (b *bench) scenarioStatus(ctx context.Context, largeID int64) (statusResult, error) {
	res := statusResult{smallRuns: 5, largeRuns: b.cfg.sizes[len(b.cfg.sizes)-1]}
	_, smallID, err := b.serviceCreate(ctx, newWindow("p2_small", res.smallRuns), 10)
	if err != nil {
		return res, err
	}
	if largeID == 0 { // P1 did not run
		if _, largeID, err = b.serviceCreate(ctx, newWindow("p2_large", res.largeRuns), 10); err != nil {
			return res, err
		}
	}
	res.largeID = largeID
	var shed atomic.Int64
	get := func(id int64) func(ctx context.Context, _ int) error {
		return b.getUntilOK(b.url("/backfills/"+strconv.FormatInt(id, 10)), &shed)
	}
	// The floor prepares its statement: the least a primary-key read can cost through the
	// driver (one round trip; the service's unprepared queries take two).
	stmt, err := b.svcDB.PrepareContext(ctx, `SELECT * FROM backfills WHERE id = $1`)
	if err != nil {
		return res, err
	}
	defer stmt.Close()
	floor := func(ctx context.Context, _ int) error { return selectRow(ctx, stmt, largeID) }
	healthURL := b.svc.base + "/healthz"
	healthz := func(ctx context.Context, _ int) error {
		return call(ctx, b.client, http.MethodGet, healthURL, nil, http.StatusOK, nil)
	}

	// Slices of half a second, interleaved (small, large, floor, healthz, small, ...), so that
	// drift in a shared machine falls on all four alike.
	const slice = 500 * time.Millisecond
	clients, slices := b.cfg.statusClients, max(2, int(b.cfg.loadDuration/slice))
	// Warm every connection on both sides first.
	for _, op := range []func(context.Context, int) error{get(smallID), floor} {
		if _, err := closedLoop(ctx, clients, slice, op); err != nil {
			return res, err
		}
	}
	for range slices {
		for _, m := range []struct {
			name string
			dst  *loadResult
			op   func(context.Context, int) error
		}{
			{"GET, 5 runs", &res.small, get(smallID)},
			{"GET, largest", &res.large, get(largeID)},
			{"floor SELECT", &res.floor, floor},
			{"GET /healthz", &res.healthz, healthz},
		} {
			svc0, svcErr := b.svc.cpu()
			gen0 := selfCPU()
			r, err := closedLoop(ctx, clients, slice, m.op)
			if err != nil {
				return res, fmt.Errorf("%s: %w", m.name, err)
			}
			gen := selfCPU() - gen0
			svc1, svcErr1 := b.svc.cpu()
			switch m.dst {
			case &res.large:
				if svcErr == nil && svcErr1 == nil {
					res.svcCPU += svc1 - svc0
				}
				res.genCPU += gen
			case &res.floor:
				res.floorGenCPU += gen
			}
			*m.dst = m.dst.merge(r)
		}
	}
	// Totals to per-request figures.
	res.svcCPU /= time.Duration(max(res.large.ops, 1))
	res.genCPU /= time.Duration(max(res.large.ops, 1))
	res.floorGenCPU /= time.Duration(max(res.floor.ops, 1))
	for _, m := range []struct {
		name string
		r    loadResult
	}{{"GET, 5 runs", res.small}, {"GET, largest", res.large}, {"floor SELECT", res.floor}, {"GET /healthz", res.healthz}} {
		b.log.Printf("P2 %-13s %7.0f/s p50 %v p99 %v", m.name, m.r.perSecond(),
			m.r.quantile(0.5).Round(time.Microsecond), m.r.quantile(0.99).Round(time.Microsecond))
	}
	if res.shed = shed.Load(); res.shed > 0 {
		b.log.Printf("P2 %d GETs were shed (503 busy) and sent again: the machine is loaded", res.shed)
	}
	return res, nil
}

// getUntilOK is a closed-loop GET that must answer 200. A 503 busy means the service shed it
// (admission control: possible when 32 clients share a loaded machine with it); it
// is counted in shed and sent again at once, so that the loop measures what was served.
func (b *bench) getUntilOK(url string, shed *atomic.Int64) func(ctx context.Context, _ int) error {
	return func(ctx context.Context, _ int) error {
		for {
			err := call(ctx, b.client, http.MethodGet, url, nil, http.StatusOK, nil)
			if err == nil || !strings.Contains(err.Error(), `status 503, want 200: {"code":"busy"`) {
				return err
			}
			shed.Add(1)
		}
	}
}

// selectRow reads the whole row, as the service does, and checks that it was there.
func selectRow(ctx context.Context, stmt *sql.Stmt, id int64) error {
	rows, err := stmt.QueryContext(ctx, id)
	if err != nil {
		return err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return err
	}
	vals := make([]sql.RawBytes, len(cols))
	dest := make([]any, len(cols))
	for i := range vals {
		dest[i] = &vals[i]
	}
	if !rows.Next() {
		return fmt.Errorf("backfill %d not found", id)
	}
	if err := rows.Scan(dest...); err != nil {
		return err
	}
	return rows.Err()
}
