package repo

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/backfillsvc/backfill/pgrun"
	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"
)

// The outbox is partitioned by range of event id (migrations/00037): an event's id is its
// writer's transaction id times 4096 plus its place in the transaction, so a partition holds
// the events of a range of transactions, and a range that every transaction has left can take
// no more. The sweep keeps one partition ahead of the ids to come, summarizes each
// partition's bloom index as its page ranges fill, and drops a partition whole once it closed
// longer ago than the events' retention: no row is deleted, nothing is left for vacuum.

// EventPartitionParams tunes SweepEventPartitions. Zero values take the defaults.
type EventPartitionParams struct {
	// Retention is how long events are kept at least: a partition goes once every
	// transaction that could write into it ended that long ago.
	Retention time.Duration
	// Span is how long a new partition's ids are meant to last at the pace the database
	// used transaction ids since the last one was made (DefaultEventPartitionSpan).
	Span time.Duration
	// MinXids and MaxXids bound a new partition's width in transaction ids.
	MinXids, MaxXids int64
}

// Defaults of EventPartitionParams. A day of a busy deployment (8.6 million events) spans
// four partitions; a quiet one's partition spans weeks at most before MinXids ids go by.
const (
	DefaultEventPartitionSpan    = 6 * time.Hour
	DefaultEventPartitionMinXids = 1 << 16
	DefaultEventPartitionMaxXids = 1 << 28
)

// EventPartitionsPass is what one SweepEventPartitions did.
type EventPartitionsPass struct {
	Created, Closed, Summarized, Dropped int
	// DeliveriesDeleted counts the webhook deliveries of dropped partitions' events.
	DeliveriesDeleted int
}

// eventPartitionLockWait bounds the waits of partition DDL for the outbox's lock: ATTACH and
// DETACH CONCURRENTLY conflict with each other, never with readers or writers.
const eventPartitionLockWait = 5 * time.Second

func (p *EventPartitionParams) defaults() {
	if p.Span <= 0 {
		p.Span = DefaultEventPartitionSpan
	}
	if p.MinXids <= 0 {
		p.MinXids = DefaultEventPartitionMinXids
	}
	if p.MaxXids < p.MinXids {
		p.MaxXids = max(p.MinXids, DefaultEventPartitionMaxXids)
	}
}

// SweepEventPartitions runs one pass of the outbox's partitions: attach the next one when the
// ids reached the last, mark closed those every transaction left, summarize their bloom
// indexes, and drop those closed longer ago than p.Retention (p.Retention zero drops none).
// Every replica runs it; creations take turns under an advisory lock, and a drop that another
// replica finished first is not an error.
func (s *Store) SweepEventPartitions(ctx context.Context, p EventPartitionParams) (EventPartitionsPass, error) {
	p.defaults()
	var pass EventPartitionsPass
	var err error
	// It also reads which partition takes the next events (the PATCH's, event_leaf.go).
	if pass.Created, err = s.EnsureEventPartitions(ctx, p); err != nil {
		return pass, err
	}
	if pass.Closed, err = s.closeEventPartitions(ctx); err != nil {
		return pass, err
	}
	if pass.Summarized, err = s.SummarizeEventTail(ctx); err != nil {
		return pass, err
	}
	if p.Retention > 0 {
		pass.Dropped, pass.DeliveriesDeleted, err = s.dropExpiredEventPartitions(ctx, p.Retention)
	}
	return pass, err
}

// eventPartition is a row of outbox_partitions.
type eventPartition struct {
	Name       string       `db:"name"`
	Lo         int64        `db:"lo"`
	Hi         int64        `db:"hi"`
	CreatedAt  time.Time    `db:"created_at"`
	CreatedXid int64        `db:"created_xid"`
	ClosedAt   sql.NullTime `db:"closed_at"`
	Summarized int64        `db:"summarized_to"`
}

// EnsureEventPartitions attaches partitions until one lies wholly ahead of the next
// transaction id (outbox_ensure_partitions, migrations/00037), and answers how many it
// attached. The service runs it at start too, before it serves: a database left without
// replicas while its transaction ids ran on (another application's) gets its partitions
// before the first event is written.
func (s *Store) EnsureEventPartitions(ctx context.Context, p EventPartitionParams) (int, error) {
	p.defaults()
	var created int
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		return tx.GetContext(ctx, &created, `
			SELECT outbox_ensure_partitions(make_interval(secs => $1), $2, $3)
			FROM (SELECT set_config('lock_timeout', $4, true)) lock_wait`,
			p.Span.Seconds(), p.MinXids, p.MaxXids, fmt.Sprint(eventPartitionLockWait.Milliseconds()))
	})
	if err != nil {
		return 0, fmt.Errorf("ensure event partitions: %w", err)
	}
	return created, s.refreshOutboxLeaf(ctx)
}

// closeEventPartitions marks closed the partitions below the outbox's horizon (the oldest
// transaction of this database still running, migrations/00014): none can write into them
// any more, so every event in one is older than its close.
func (s *Store) closeEventPartitions(ctx context.Context) (int, error) {
	return s.deleted(ctx, "close event partitions", `
		UPDATE outbox_partitions SET closed_at = backfill_now()
		WHERE closed_at IS NULL AND hi <= event_horizon(pg_current_snapshot())`)
}

// eventSummarizeMargin is how many of an open partition's last pages are left unsummarized
// (outbox_summarize, migrations/00037): two page ranges.
const eventSummarizeMargin = 32

// eventSummarizeLockWait bounds the summary's wait for a partition's lock (autovacuum's, or
// a drop's): it is tried again within a second.
const eventSummarizeLockWait = time.Second

// SummarizeEventTail summarizes the page ranges of the outbox's bloom index that no longer
// take rows, and answers how many partitions it summarized: a read by backfill looks at every
// unsummarized range whole, so the replicas run it every second (sweeper.Summarizer). One
// replica at a time; the others return at once.
func (s *Store) SummarizeEventTail(ctx context.Context) (int, error) {
	n, err := readValue(ctx, s, func(ctx context.Context, q pgrun.Queryer) (n int, err error) {
		err = sqlx.GetContext(ctx, q, &n, `
			SELECT outbox_summarize($1) FROM (SELECT set_config('lock_timeout', $2, true)) lock_wait`,
			eventSummarizeMargin, fmt.Sprint(eventSummarizeLockWait.Milliseconds()))
		return n, err
	})
	if err != nil {
		return 0, fmt.Errorf("summarize the outbox's bloom index: %w", err)
	}
	return n, nil
}

// dropExpiredEventPartitions drops the partitions closed longer ago than retention, the
// oldest first: their webhook deliveries first (the foreign key), in batches, then DETACH
// CONCURRENTLY, which waits for the readers that may still see the partition instead of
// locking them out, and DROP TABLE, which then locks nothing but the table.
func (s *Store) dropExpiredEventPartitions(ctx context.Context, retention time.Duration) (dropped, deliveries int, err error) {
	var expired []struct {
		eventPartition
		Pending *bool `db:"pending"`
	}
	err = s.readRetried(ctx, func(ctx context.Context, q pgrun.Queryer) error {
		return sqlx.SelectContext(ctx, q, &expired, `
			SELECT p.name, p.lo, p.hi, p.created_at, p.created_xid, p.closed_at, p.summarized_to,
				(SELECT h.inhdetachpending FROM pg_inherits h
				 WHERE h.inhrelid = to_regclass(p.name) AND h.inhparent = 'outbox'::regclass) AS pending
			FROM outbox_partitions p
			WHERE p.closed_at < backfill_now() - make_interval(secs => $1)
			ORDER BY p.hi`, retention.Seconds())
	})
	if err != nil {
		return 0, 0, fmt.Errorf("read expired event partitions: %w", err)
	}
	for _, p := range expired {
		for {
			n, err := s.deleted(ctx, "delete deliveries of "+p.Name, `
				DELETE FROM webhook_deliveries WHERE (webhook_id, event_id) IN (
					SELECT webhook_id, event_id FROM webhook_deliveries
					WHERE event_id >= $1 AND event_id < $2 LIMIT 5000)`, p.Lo, p.Hi)
			deliveries += n
			if err != nil {
				return dropped, deliveries, err
			}
			if n < 5000 {
				break
			}
		}
		done, err := s.detachAndDrop(ctx, p.Name, p.Pending)
		if err != nil {
			return dropped, deliveries, err
		}
		if done {
			dropped++
		}
	}
	return dropped, deliveries, nil
}

// detachAndDrop detaches partition name from the outbox and drops it; done is false when
// another replica's pass was detaching it at the same time (that one finishes it). pending
// says where an earlier pass stopped: nil, the table is not a partition any more (only the
// DROP is left); true, a DETACH CONCURRENTLY interrupted after its first phase, which only
// FINALIZE completes.
func (s *Store) detachAndDrop(ctx context.Context, name string, pending *bool) (done bool, err error) {
	table := pq.QuoteIdentifier(name)
	if pending != nil {
		detach := `ALTER TABLE outbox DETACH PARTITION ` + table + ` CONCURRENTLY`
		if *pending {
			detach = `ALTER TABLE outbox DETACH PARTITION ` + table + ` FINALIZE`
		}
		// Outside a transaction: DETACH CONCURRENTLY waits for the transactions that may
		// still see the partition instead of locking readers and writers out.
		dctx, cancel := context.WithTimeout(ctx, 6*eventPartitionLockWait)
		_, err := s.deleted(dctx, "detach "+name, detach)
		cancel()
		if err != nil {
			// Another replica's pass detaching it at the same time is not this pass's
			// failure: the next pass finds where that one stopped.
			attached, rerr := readValue(ctx, s, func(ctx context.Context, q pgrun.Queryer) (attached bool, err error) {
				err = sqlx.GetContext(ctx, q, &attached, `SELECT EXISTS (SELECT 1 FROM pg_inherits
					WHERE inhrelid = to_regclass($1) AND NOT inhdetachpending)`, name)
				return attached, err
			})
			if rerr == nil && !attached {
				return false, nil
			}
			return false, err
		}
	}
	if _, err := s.deleted(ctx, "drop "+name, `DROP TABLE IF EXISTS `+table); err != nil {
		return false, err
	}
	n, err := s.deleted(ctx, "forget "+name, `DELETE FROM outbox_partitions WHERE name = $1`, name)
	return n > 0, err
}
