package main

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// targetEventWriters: event-writing changes reach at least 90 % of the throughput they would
// have without events (the contract's "Events never hold the service back").
const targetEventWriters = 0.90

// eventWritersResult is P9: PATCH-like changes per second at each client count, with the
// outbox writer on (each change writes backfill.updated) and off.
type eventWritersResult struct {
	clients       []int
	with, without []float64 // changes per second, best of the rounds
}

// scenarioEventWriters is P9, on the floor database (the service's own migrations, so its
// triggers are the real outbox writer and webhook fan-out, with one webhook registered so
// that every event also makes a delivery). Each client changes its own backfill's
// max_active_runs in autocommit, as PATCH /backfills/{id} does, for loadDuration; rounds
// alternate with the event trigger disabled (no events) and enabled, so that drift of a
// shared machine falls on both sides alike.
func (b *bench) scenarioEventWriters(ctx context.Context) (eventWritersResult, error) {
	res := eventWritersResult{clients: []int{8, 32}}
	if b.cfg.smoke {
		// The smoke run shares the server with the rest of the suite: it checks that the
		// scenario runs, with connections to spare.
		res.clients = []int{2, 4}
	}
	maxClients := res.clients[len(res.clients)-1]
	ids := make([]int64, maxClients)
	for i := range ids {
		dag := fmt.Sprintf("p9_%d", i)
		if err := floorDag(ctx, b.floor, dag); err != nil {
			return res, err
		}
		id, err := copyCreate(ctx, b.floor, newWindow(dag, 1), 10, b.triggerCounts)
		if err != nil {
			return res, fmt.Errorf("p9 backfill: %w", err)
		}
		ids[i] = id
	}
	if _, err := b.floor.ExecContext(ctx, `INSERT INTO webhooks (url, event_types, secret, created_at)
		VALUES ('https://example.com/p9', ARRAY['backfill.updated'], 'whsec_cDk=', now())`); err != nil {
		return res, fmt.Errorf("p9 webhook: %w", err)
	}
	toggle := func(on bool) error {
		verb := "DISABLE"
		if on {
			verb = "ENABLE"
		}
		_, err := b.floor.ExecContext(ctx, `ALTER TABLE backfills `+verb+` TRIGGER backfills_events_on_update`)
		return err
	}
	defer func() { _ = toggle(true) }()
	rounds := 2
	if b.cfg.smoke {
		rounds = 1
	}
	for _, clients := range res.clients {
		var best [2]float64
		for range rounds {
			for i, on := range []bool{false, true} {
				if err := toggle(on); err != nil {
					return res, fmt.Errorf("p9 toggle events: %w", err)
				}
				r, err := patchLoad(ctx, b.floor, ids[:clients], b.cfg.loadDuration)
				if err != nil {
					return res, err
				}
				best[i] = max(best[i], r)
			}
		}
		res.without = append(res.without, best[0])
		res.with = append(res.with, best[1])
	}
	return res, nil
}

// patchLoad runs one client per backfill, each changing its backfill's max_active_runs
// (a different value every time, so that every change is a change) until d has passed, and
// answers the changes per second.
func patchLoad(ctx context.Context, db *sql.DB, ids []int64, d time.Duration) (float64, error) {
	r, err := closedLoop(ctx, len(ids), d, func(ctx context.Context, worker int) error {
		_, err := db.ExecContext(ctx, `
			UPDATE backfills SET max_active_runs = max_active_runs % 900 + 1, updated_at = backfill_now()
			WHERE id = $1 AND state IN ('running', 'paused', 'canceling')`, ids[worker])
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("p9 load: %w", err)
	}
	return r.perSecond(), nil
}

func eventWritersRows(e eventWritersResult) []row {
	var rows []row
	for i, c := range e.clients {
		ratio := e.with[i] / max(e.without[i], 1)
		rows = append(rows, row{
			fmt.Sprintf("P9 event-writing changes (PATCH max_active_runs), %d clients", c),
			rate(e.with[i], "changes/s") + " with events",
			rate(e.without[i], "changes/s") + " without",
			ratioStr(ratio), fmt.Sprintf("≥ %.2f", targetEventWriters), verdict(ratio >= targetEventWriters)})
	}
	return rows
}
