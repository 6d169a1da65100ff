package repo

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/domain"
	"github.com/backfillsvc/backfill/internal/testkit/pgtest"
	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// partitionsOf lists the outbox's bookkeeping (outbox_partitions), lowest range first.
func partitionsOf(t *testing.T, db *sqlx.DB) []eventPartition {
	t.Helper()
	var ps []eventPartition
	require.NoError(t, db.Select(&ps, `
		SELECT name, lo, hi, created_at, created_xid, closed_at, summarized_to
		FROM outbox_partitions ORDER BY hi`))
	return ps
}

// partitionOf is the row of outbox_partitions whose range holds id.
func partitionOf(t *testing.T, db *sqlx.DB, id int64) eventPartition {
	t.Helper()
	var p eventPartition
	require.NoError(t, db.Get(&p, `
		SELECT name, lo, hi, created_at, created_xid, closed_at, summarized_to
		FROM outbox_partitions WHERE lo <= $1 AND hi > $1`, id))
	return p
}

// attachedPartitions maps each table attached to the outbox (pg_inherits, detach not pending)
// to its bound as PostgreSQL prints it.
func attachedPartitions(t *testing.T, db *sqlx.DB) map[string]string {
	t.Helper()
	var rows []struct {
		Name  string `db:"name"`
		Bound string `db:"bound"`
	}
	require.NoError(t, db.Select(&rows, `
		SELECT c.relname AS name, pg_get_expr(c.relpartbound, c.oid) AS bound
		FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = 'outbox'::regclass AND NOT i.inhdetachpending`))
	out := map[string]string{}
	for _, r := range rows {
		out[r.Name] = r.Bound
	}
	return out
}

// tableExists says whether a table of that name is left in the database.
func tableExists(t *testing.T, db *sqlx.DB, name string) bool {
	t.Helper()
	var exists bool
	require.NoError(t, db.Get(&exists, `SELECT to_regclass($1) IS NOT NULL`, name))
	return exists
}

// outboxIDs lists the ids of the outbox in [lo, hi), in order.
func outboxIDs(t *testing.T, db *sqlx.DB, lo, hi int64) []int64 {
	t.Helper()
	var ids []int64
	require.NoError(t, db.Select(&ids, `SELECT id FROM outbox WHERE id >= $1 AND id < $2 ORDER BY id`, lo, hi))
	return ids
}

// patchMaxActive changes the backfill's max_active_runs through the service's PATCH: one
// backfill.updated event.
func patchMaxActive(t *testing.T, s *Store, id int64, n int) {
	t.Helper()
	_, err := s.BackfillPatch(context.Background(), BackfillPatchParams{ID: id, MaxActiveRuns: &n})
	require.NoError(t, err)
}

// deliverAll gives every event of the outbox in [lo, hi) a pending delivery to the webhook,
// and the first of them an attempt, as the fan-out and a delivery worker would: the rows a
// partition's drop must delete first (their foreign key to the outbox).
func deliverAll(t *testing.T, db *sqlx.DB, webhook, lo, hi int64) int {
	t.Helper()
	res, err := db.Exec(`
		INSERT INTO webhook_deliveries (webhook_id, event_id, next_attempt_at, created_at)
		SELECT $1, id, now(), now() FROM outbox WHERE id >= $2 AND id < $3`, webhook, lo, hi)
	require.NoError(t, err)
	n, err := res.RowsAffected()
	require.NoError(t, err)
	_, err = db.Exec(`
		INSERT INTO webhook_attempts (webhook_id, event_id, attempt, status_code, attempted_at)
		SELECT $1, min(id), 1, 500, now() FROM outbox WHERE id >= $2 AND id < $3`, webhook, lo, hi)
	require.NoError(t, err)
	return int(n)
}

// newWebhook creates a webhook through the store, for deliveries to refer to.
func newWebhook(t *testing.T, s *Store) int64 {
	t.Helper()
	w, _, err := s.WebhookCreate(context.Background(), WebhookCreateParams{
		URL: "https://example.com/hook", EventTypes: []string{"backfill.updated"}, Secret: "whsec_x",
	})
	require.NoError(t, err)
	return w.ID
}

// sweepUntilClosed runs SweepEventPartitions until the partition named name is closed (a
// transaction of this database that could still write into it must end first) and answers
// the passes' sum.
func sweepUntilClosed(t *testing.T, s *Store, db *sqlx.DB, name string, p EventPartitionParams) EventPartitionsPass {
	t.Helper()
	var sum EventPartitionsPass
	for range 200 {
		pass, err := s.SweepEventPartitions(context.Background(), p)
		require.NoError(t, err)
		sum.Created += pass.Created
		sum.Closed += pass.Closed
		sum.Summarized += pass.Summarized
		sum.Dropped += pass.Dropped
		sum.DeliveriesDeleted += pass.DeliveriesDeleted
		var closed bool
		require.NoError(t, db.Get(&closed, `SELECT closed_at IS NOT NULL FROM outbox_partitions WHERE name = $1`, name))
		if closed {
			return sum
		}
		time.Sleep(10 * time.Millisecond)
	}
	require.FailNow(t, "partition never closed", name)
	return sum
}

// EnsureEventPartitions keeps exactly one partition ahead of the ids to come: once the next
// transaction id reaches the last partition's lo (CutEventPartition makes the last one start
// there), a pass attaches the next one, right after it and as wide as the bounds allow; while
// one lies wholly ahead, a pass attaches nothing. Without this, the first event of a
// transaction past the last partition would fail ("no partition of relation outbox found").
func TestEnsureEventPartitionsAttachesTheNextOnceTheIDsReachTheLast(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name             string
		minXids, maxXids int64
		// wantXids is the width the bounds force (0: only within [min, max], as the
		// pace since the last partition's creation may set it).
		wantXids int64
	}{
		{name: "min equals max fixes the width", minXids: 100_000, maxXids: 100_000, wantXids: 100_000},
		// The last partition is about 4M transaction ids wide: MinXids above it widens the
		// next one, MaxXids below it narrows it.
		{name: "min above the pace widens", minXids: 8 << 20},
		{name: "max below the pace narrows", minXids: 1000, maxXids: 5000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db, _ := pgtest.Open(t)
			s := New(db, Config{})
			params := EventPartitionParams{MinXids: tc.minXids, MaxXids: tc.maxXids}

			pgtest.CutEventPartition(t, db)
			before := partitionsOf(t, db)
			last := before[len(before)-1]
			var next int64
			require.NoError(t, db.Get(&next, `SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint`))
			require.LessOrEqual(t, last.Lo, next<<12, "the last partition starts at the next transaction id")

			created, err := s.EnsureEventPartitions(ctx, params)
			require.NoError(t, err)
			require.Equal(t, 1, created, "the ids reached the last partition: the next one is attached")

			after := partitionsOf(t, db)
			require.Len(t, after, len(before)+1)
			added := after[len(after)-1]
			require.Equal(t, last.Hi, added.Lo, "the new partition starts where the last ended")
			require.Equal(t, fmt.Sprintf("outbox_p%d", added.Lo), added.Name)
			require.False(t, added.ClosedAt.Valid)
			width := (added.Hi - added.Lo) >> 12
			require.Zero(t, (added.Hi-added.Lo)%(1<<12), "a partition holds whole transactions")
			maxXids := tc.maxXids
			if maxXids < tc.minXids {
				maxXids = DefaultEventPartitionMaxXids
			}
			require.GreaterOrEqual(t, width, tc.minXids, "width in transaction ids")
			require.LessOrEqual(t, width, maxXids, "width in transaction ids")
			if tc.wantXids != 0 {
				require.Equal(t, tc.wantXids, width)
			}

			// Attached as a partition of the outbox with the bookkept range, with the outbox's
			// indexes (its bloom index by backfill included).
			attached := attachedPartitions(t, db)
			require.Equal(t, fmt.Sprintf("FOR VALUES FROM ('%d') TO ('%d')", added.Lo, added.Hi), attached[added.Name])
			require.Len(t, attached, len(after), "every bookkept partition is attached, and only those")
			for _, p := range after {
				require.Contains(t, attached, p.Name)
			}
			var methods []string
			require.NoError(t, db.Select(&methods, `
				SELECT a.amname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am a ON a.oid = c.relam
				WHERE i.indrelid = $1::regclass ORDER BY a.amname`, added.Name))
			require.Equal(t, []string{"brin", "btree"}, methods)
			// No CHECK of its bound stays behind (migrations/00038): it has only the outbox's.
			var checks, parents []string
			require.NoError(t, db.Select(&checks, `SELECT conname FROM pg_constraint
				WHERE conrelid = $1::regclass AND contype = 'c' ORDER BY conname`, added.Name))
			require.NoError(t, db.Select(&parents, `SELECT conname FROM pg_constraint
				WHERE conrelid = 'outbox'::regclass AND contype = 'c' ORDER BY conname`))
			require.Equal(t, parents, checks)

			// One lies wholly ahead now: nothing more, however often the sweep asks.
			for range 3 {
				created, err = s.EnsureEventPartitions(ctx, params)
				require.NoError(t, err)
				require.Zero(t, created, "a partition lies wholly ahead of the next transaction id")
			}
			require.Len(t, partitionsOf(t, db), len(after))

			// Events still land where their ids belong.
			otherEvents(t, db, 3)
			var misplaced int
			require.NoError(t, db.Get(&misplaced, `
				SELECT count(*) FROM outbox o JOIN outbox_partitions p ON p.name = o.tableoid::regclass::text
				WHERE NOT (o.id >= p.lo AND o.id < p.hi)`))
			require.Zero(t, misplaced)
		})
	}
}

// A partition's whole life under the store's clock: written, closed once every transaction
// that could write into it ended, kept while closed for less than Retention, then dropped
// whole (the table gone, not its rows deleted) with its webhook deliveries, which refer to
// its events. The events after it stay, and a reader whose Last-Event-ID lies inside the
// dropped range resumes with the events after it, in order, none missing: EventList and
// EventScan answer by id > after, and the drop only ever removes a prefix of the ids.
func TestEventPartitionRetentionDropsTheWholePartitionAndReadersResumeAfterIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, _ := pgtest.Open(t)
	s := New(db, Config{})
	start := time.Now().UTC().Truncate(time.Second)
	require.NoError(t, pgtest.SetClock(ctx, db, start))
	const retention = 7 * 24 * time.Hour
	params := EventPartitionParams{Retention: retention}
	webhook := newWebhook(t, s)

	// Before the cut: a backfill's creation and a change, and other backfills' events.
	id := createBackfill(t, db, "d")
	patchMaxActive(t, s, id, 2)
	otherEvents(t, db, 40)
	old := outboxIDs(t, db, 0, 1<<62)
	require.Len(t, old, 42)
	oldPart := partitionOf(t, db, old[0])
	require.Equal(t, oldPart, partitionOf(t, db, old[len(old)-1]), "the events so far share a partition")
	pgtest.CutEventPartition(t, db)
	oldPart = partitionOf(t, db, old[0])
	require.Greater(t, oldPart.Hi, old[len(old)-1])

	// After the cut: the same backfill's changes around other events.
	patchMaxActive(t, s, id, 3)
	otherEvents(t, db, 30)
	patchMaxActive(t, s, id, 4)
	later := outboxIDs(t, db, oldPart.Hi, 1<<62)
	require.Len(t, later, 32)
	oldDeliveries := deliverAll(t, db, webhook, oldPart.Lo, oldPart.Hi)
	require.Equal(t, len(old), oldDeliveries)
	require.Equal(t, len(later), deliverAll(t, db, webhook, oldPart.Hi, 1<<62))

	// Closed as soon as the sweep sees every transaction below its end finished; closed just
	// now, it is kept.
	pass := sweepUntilClosed(t, s, db, oldPart.Name, params)
	require.Zero(t, pass.Dropped, "a partition closed just now is kept for Retention")
	require.Equal(t, 1, pass.Created, "the cut's new partition was reached: the next one was attached")
	require.True(t, tableExists(t, db, oldPart.Name))
	require.Len(t, outboxIDs(t, db, 0, 1<<62), len(old)+len(later))

	// Still kept a second before Retention has passed since it closed.
	require.NoError(t, pgtest.SetClock(ctx, db, start.Add(retention-time.Second)))
	pass, err := s.SweepEventPartitions(ctx, params)
	require.NoError(t, err)
	require.Zero(t, pass.Dropped)
	require.True(t, tableExists(t, db, oldPart.Name))

	// Past Retention: dropped whole, with the deliveries of its events (and their attempts).
	require.NoError(t, pgtest.SetClock(ctx, db, start.Add(retention+time.Second)))
	pass, err = s.SweepEventPartitions(ctx, params)
	require.NoError(t, err)
	require.GreaterOrEqual(t, pass.Dropped, 1)
	require.Equal(t, oldDeliveries, pass.DeliveriesDeleted)
	require.False(t, tableExists(t, db, oldPart.Name), "the partition's table is dropped")
	require.NotContains(t, attachedPartitions(t, db), oldPart.Name)
	for _, p := range partitionsOf(t, db) {
		require.NotEqual(t, oldPart.Name, p.Name, "its bookkeeping goes with it")
		require.Greater(t, p.Hi, old[len(old)-1], "every partition that held an old event went")
	}
	require.Empty(t, outboxIDs(t, db, 0, oldPart.Hi), "its events are gone")
	var deliveries []int64
	require.NoError(t, db.Select(&deliveries, `SELECT event_id FROM webhook_deliveries ORDER BY event_id`))
	require.Equal(t, later, deliveries, "the deliveries of its events are gone, the later ones' stay")
	var attempts []int64
	require.NoError(t, db.Select(&attempts, `SELECT event_id FROM webhook_attempts ORDER BY event_id`))
	require.Equal(t, []int64{later[0]}, attempts)
	require.Equal(t, later, outboxIDs(t, db, 0, 1<<62), "the later events remain")

	// Nothing is left to drop: a pass is a no-op.
	pass, err = s.SweepEventPartitions(ctx, params)
	require.NoError(t, err)
	require.Zero(t, pass.Dropped)

	// A reader that had read up to an event of the dropped partition resumes after it.
	for _, after := range []int64{old[0], old[len(old)/2], old[len(old)-1]} {
		evs, err := s.EventList(ctx, EventListParams{After: after, Limit: 1000, Wait: 10 * time.Second})
		require.NoError(t, err)
		require.Equal(t, later, idsOf(evs), "EventList after %d", after)

		// In pages smaller than the rest, as a stream replays.
		var paged []int64
		for cursor := after; ; {
			evs, err := s.EventList(ctx, EventListParams{After: cursor, Limit: 7, Wait: 10 * time.Second})
			require.NoError(t, err)
			if len(evs) == 0 {
				break
			}
			paged = append(paged, idsOf(evs)...)
			cursor = evs[len(evs)-1].ID
		}
		require.Equal(t, later, paged, "EventList in pages after %d", after)

		var scanned []int64
		for cursor := after; ; {
			page, err := s.EventScan(ctx, EventScanParams{After: cursor, Limit: 10})
			require.NoError(t, err)
			scanned = append(scanned, idsOf(page.Events)...)
			require.GreaterOrEqual(t, page.Next, cursor)
			cursor = page.Next
			if page.End && !page.Held {
				break
			}
		}
		require.Equal(t, later, scanned, "EventScan after %d", after)
	}

	// The backfill whose creation went with the partition: its later events, with their
	// documents, from its Last-Event-ID in the dropped range.
	evs, err := s.EventList(ctx, EventListParams{After: old[0], Limit: 100, BackfillID: &id, Wait: 10 * time.Second})
	require.NoError(t, err)
	require.Equal(t, []domain.EventType{domain.EventBackfillUpdated, domain.EventBackfillUpdated}, eventTypes(evs))
	for i, want := range []int{3, 4} {
		var data struct {
			Backfill struct {
				ID            int64  `json:"id"`
				DagID         string `json:"dag_id"`
				MaxActiveRuns int    `json:"max_active_runs"`
			} `json:"backfill"`
		}
		require.NoError(t, json.Unmarshal(evs[i].Data, &data), "%s", evs[i].Data)
		require.Equal(t, id, data.Backfill.ID)
		require.Equal(t, "d", data.Backfill.DagID)
		require.Equal(t, want, data.Backfill.MaxActiveRuns)
	}
	page, err := s.EventScan(ctx, EventScanParams{After: old[0], Limit: 100, BackfillID: &id})
	require.NoError(t, err)
	require.Equal(t, idsOf(evs), idsOf(page.Events))
}

// idsOf lists the ids of evs in order.
func idsOf(evs []domain.Event) []int64 {
	ids := make([]int64, 0, len(evs))
	for _, e := range evs {
		ids = append(ids, e.ID)
	}
	return ids
}

// Every replica runs the sweep: two stores on the same database (two replicas, each its own
// pool) passing at the same instant never fail, attach the next partition once (the advisory
// lock), close each partition once, and drop each expired partition once, its deliveries
// deleted once: a DETACH that the other replica finished or began first is not an error, and
// the bookkeeping ends up matching the attached tables exactly.
func TestEventPartitionSweepsOfTwoReplicasAtOnce(t *testing.T) {
	t.Parallel()
	for round := range 3 {
		t.Run(fmt.Sprint("round ", round), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db, dsn := pgtest.Open(t)
			db2, err := sqlx.Open("postgres", dsn)
			require.NoError(t, err)
			t.Cleanup(func() { _ = db2.Close() })
			replicas := []*Store{New(db, Config{}), New(db2, Config{})}
			start := time.Now().UTC().Truncate(time.Second)
			require.NoError(t, pgtest.SetClock(ctx, db, start))
			const retention = time.Hour
			webhook := newWebhook(t, replicas[0])

			// Two ranges of events, each cut off in its own partition, then the current one's.
			otherEvents(t, db, 20)
			pgtest.CutEventPartition(t, db)
			otherEvents(t, db, 20)
			pgtest.CutEventPartition(t, db)
			otherEvents(t, db, 20)
			all := outboxIDs(t, db, 0, 1<<62)
			first, second, current := partitionOf(t, db, all[0]), partitionOf(t, db, all[20]), partitionOf(t, db, all[40])
			require.Equal(t, first.Hi, second.Lo)
			require.Equal(t, second.Hi, current.Lo)
			require.Equal(t, 60, deliverAll(t, db, webhook, 0, 1<<62))
			top := partitionsOf(t, db)
			require.Equal(t, current.Name, top[len(top)-1].Name, "the ids reached the last partition")

			// What earlier passes did: close the cut partitions, summarize them. They have been
			// closed for longer than Retention when the replicas pass.
			for {
				_, err := replicas[0].closeEventPartitions(ctx)
				require.NoError(t, err)
				var open int
				require.NoError(t, db.Get(&open, `SELECT count(*) FROM outbox_partitions WHERE name IN ($1, $2) AND closed_at IS NULL`,
					first.Name, second.Name))
				if open == 0 {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			_, err = replicas[0].SummarizeEventTail(ctx)
			require.NoError(t, err)
			require.NoError(t, pgtest.SetClock(ctx, db, start.Add(retention+time.Second)))

			var wg sync.WaitGroup
			passes := make([]EventPartitionsPass, len(replicas))
			errs := make([]error, len(replicas))
			release := make(chan struct{})
			for i, s := range replicas {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-release
					passes[i], errs[i] = s.SweepEventPartitions(ctx, EventPartitionParams{Retention: retention})
				}()
			}
			close(release)
			wg.Wait()
			for i := range replicas {
				require.NoError(t, errs[i], "replica %d", i)
			}
			t.Logf("passes: %+v", passes)
			require.Equal(t, 1, passes[0].Created+passes[1].Created, "the next partition is attached once")
			require.Equal(t, 60-20, passes[0].DeliveriesDeleted+passes[1].DeliveriesDeleted,
				"the dropped events' deliveries are deleted once")
			require.GreaterOrEqual(t, passes[0].Dropped+passes[1].Dropped, 2)

			for _, p := range []eventPartition{first, second} {
				require.False(t, tableExists(t, db, p.Name), "%s is dropped", p.Name)
			}
			require.Equal(t, all[40:], outboxIDs(t, db, 0, 1<<62), "the current partition's events remain")
			var deliveries []int64
			require.NoError(t, db.Select(&deliveries, `SELECT event_id FROM webhook_deliveries ORDER BY event_id`))
			require.Equal(t, all[40:], deliveries)

			// The bookkeeping and the catalog agree: every row an attached table, every
			// attached table a row, the ranges contiguous, the next one ahead of the ids.
			ps := partitionsOf(t, db)
			attached := attachedPartitions(t, db)
			require.Len(t, attached, len(ps))
			for i, p := range ps {
				require.Equal(t, fmt.Sprintf("FOR VALUES FROM ('%d') TO ('%d')", p.Lo, p.Hi), attached[p.Name])
				if i > 0 {
					require.Equal(t, ps[i-1].Hi, p.Lo, "ranges are contiguous")
				}
			}
			require.Equal(t, current.Name, ps[0].Name)
			var pending int
			require.NoError(t, db.Get(&pending, `SELECT count(*) FROM pg_inherits WHERE inhparent = 'outbox'::regclass AND inhdetachpending`))
			require.Zero(t, pending, "no detach is left half done")

			// And the next passes of both have nothing left to do.
			for _, s := range replicas {
				pass, err := s.SweepEventPartitions(ctx, EventPartitionParams{Retention: retention})
				require.NoError(t, err)
				require.Zero(t, pass.Created+pass.Dropped+pass.DeliveriesDeleted)
			}
		})
	}
}

// A backfill created before a flood of other backfills' events reads its own through the
// bloom index: the page ranges whose filter may hold it (its first events' and the
// unsummarized end), not every event since its creation, as the read by the backfill's bound
// did before migrations/00037 (TestBackfillEventsAreReadFromTheBackfillsBound: the bound
// leaves out only what came before the backfill). Both reads by backfill are counted
// (EventList's backfill_events, EventScan's events_scan), right after the flood, while the
// partition has no statistics yet (autovacuum analyzes a partition a minute or more after its
// rows came; a new partition is attached every few hours), and once it is analyzed.
func TestBackfillEventsReadAfterAFloodTouchOnlyPartOfIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, db := oneConnectionStore(t)
	var current string
	require.NoError(t, db.Get(&current, `
		SELECT name FROM outbox_partitions
		WHERE pg_snapshot_xmax(pg_current_snapshot())::text::bigint << 12 BETWEEN lo AND hi - 1`))
	// The partition stays without statistics until the test analyzes it: the state every
	// partition is in until autovacuum gets to it.
	db.MustExec(`ALTER TABLE ` + current + ` SET (autovacuum_enabled = off)`)

	id := createBackfill(t, db, "d")
	patchMaxActive(t, s, id, 2)
	patchMaxActive(t, s, id, 3)
	const flood = 44_000
	for range flood / 4000 { // a transaction writes at most 4,096 events
		otherEvents(t, db, 4000)
	}
	// The sweep summarizes the bloom index's full page ranges (all but the last pages of the
	// partition being written).
	pass, err := s.SweepEventPartitions(ctx, EventPartitionParams{})
	require.NoError(t, err)
	require.Positive(t, pass.Summarized, "the flood's page ranges are summarized")
	from := eventsFrom(t, db, `SELECT events_from FROM backfills WHERE id = $1`, id)
	require.Greater(t, from, int64(flood), "the backfill's bound is below the whole flood")
	var floodIn string
	require.NoError(t, db.Get(&floodIn, `SELECT tableoid::regclass::text FROM outbox ORDER BY id DESC LIMIT 1`))
	require.Equal(t, current, floodIn, "the flood is in the partition without statistics")

	check := func(t *testing.T) {
		// Warm: a first read may wait for a transaction of another database (the horizon).
		_, err := s.EventList(ctx, EventListParams{After: 0, Limit: 100, BackfillID: &id, Wait: 10 * time.Second})
		require.NoError(t, err)
		before := eventRowsRead(t, db)
		evs, err := s.EventList(ctx, EventListParams{After: 0, Limit: 100, BackfillID: &id, Wait: 10 * time.Second})
		require.NoError(t, err)
		read := eventRowsRead(t, db) - before
		t.Logf("EventList read %d rows of the outbox; %d events since the backfill's bound", read, from)
		require.Equal(t, []domain.EventType{domain.EventBackfillCreated, domain.EventBackfillUpdated, domain.EventBackfillUpdated},
			eventTypes(evs))
		for i, e := range evs {
			require.Equal(t, id, e.BackfillID)
			require.Equal(t, "d", e.DagID)
			var data struct {
				Backfill struct {
					ID            int64 `json:"id"`
					MaxActiveRuns int   `json:"max_active_runs"`
				} `json:"backfill"`
			}
			require.NoError(t, json.Unmarshal(e.Data, &data), "%s", e.Data)
			require.Equal(t, id, data.Backfill.ID)
			require.Equal(t, i+1, data.Backfill.MaxActiveRuns)
		}
		assert.Less(t, read, int64(flood/4), "rows of the outbox EventList read for 3 events among %d", flood)

		before = eventRowsRead(t, db)
		page, err := s.EventScan(ctx, EventScanParams{After: 0, Limit: 100, BackfillID: &id})
		require.NoError(t, err)
		read = eventRowsRead(t, db) - before
		t.Logf("EventScan read %d rows of the outbox", read)
		if !page.Held {
			require.Equal(t, idsOf(evs), idsOf(page.Events))
		}
		assert.Less(t, read, int64(flood/4), "rows of the outbox one EventScan step read for 3 events among %d", flood)
	}
	t.Run("partition not analyzed yet", func(t *testing.T) {
		var analyzed bool
		require.NoError(t, db.Get(&analyzed, `SELECT EXISTS (SELECT 1 FROM pg_stats WHERE tablename = $1)`, current))
		require.False(t, analyzed)
		check(t)
	})
	t.Run("partition analyzed", func(t *testing.T) {
		db.MustExec(`ANALYZE ` + current)
		check(t)
	})
}

// A PATCH writes its event into the outbox's current partition once the store knows it, and
// one that finds the partition it knows past (the next partition began since) writes through
// outbox instead, nothing written twice.
func TestPatchWritesIntoTheCurrentPartitionAndFallsBackPastIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, _ := pgtest.Open(t)
	s := New(db, Config{})
	id := createBackfill(t, db, "leaf")
	_, err := s.EnsureEventPartitions(ctx, EventPartitionParams{})
	require.NoError(t, err)
	leaf := s.leaf.name.Load()
	require.NotNil(t, leaf, "the store knows the current partition")
	require.Equal(t, *leaf, s.eventTable())

	patchTo := func(n int) string {
		t.Helper()
		_, err := s.BackfillPatch(ctx, BackfillPatchParams{ID: id, MaxActiveRuns: &n})
		require.NoError(t, err)
		var part string
		require.NoError(t, db.Get(&part, `SELECT tableoid::regclass::text FROM outbox
			WHERE backfill_id = $1 ORDER BY id DESC LIMIT 1`, id))
		return part
	}
	require.Equal(t, *leaf, patchTo(2))

	// A partition that no longer takes the next ids: the statement fails whole, and the PATCH
	// goes through outbox, which routes it.
	past := "events_legacy"
	s.leaf.name.Store(&past)
	require.Equal(t, *leaf, patchTo(3))
	require.Nil(t, s.leaf.name.Load(), "the store forgets the partition it found past")
	var events int
	require.NoError(t, db.Get(&events, `SELECT count(*) FROM events WHERE backfill_id = $1 AND type = 'backfill.updated'`, id))
	require.Equal(t, 2, events, "one event a PATCH")
}
