package repo

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/backfillsvc/backfill/pgrun"
	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"
	"github.com/lib/pq/pqerror"
)

// The PATCH, the one event writer on a hot path, inserts its event into the outbox's partition
// that takes the next ids rather than into outbox: routing a row through the partitioned
// table sets the routing up in every statement, which cost writers a few per cent of their
// throughput at 32 clients (P9). A partition checks its own bound on a direct insert, so an
// id past it (the next partition began since the name was read) fails the statement whole,
// nothing written, and the PATCH runs again through outbox.

// outboxLeaf is the partition the replica's PATCHes insert into; nil until the sweep (or the
// start's EnsureEventPartitions) read it, and after a PATCH found it past.
type outboxLeaf struct{ name atomic.Pointer[string] }

// refreshOutboxLeaf reads which partition takes the next transaction ids' events.
func (s *Store) refreshOutboxLeaf(ctx context.Context) error {
	name, err := readValue(ctx, s, func(ctx context.Context, q pgrun.Queryer) (name string, err error) {
		err = sqlx.GetContext(ctx, q, &name, `
			SELECT coalesce((SELECT name FROM outbox_partitions
				WHERE lo <= pg_snapshot_xmax(pg_current_snapshot())::text::bigint << 12
				  AND hi > pg_snapshot_xmax(pg_current_snapshot())::text::bigint << 12), '')`)
		return name, err
	})
	if err != nil {
		return fmt.Errorf("read the outbox's current partition: %w", err)
	}
	if name == "" {
		s.leaf.name.Store(nil)
		return nil
	}
	s.leaf.name.Store(&name)
	return nil
}

// eventTable is the table the PATCH's event goes into: the current partition when known.
func (s *Store) eventTable() string {
	if name := s.leaf.name.Load(); name != nil {
		return *name
	}
	return "outbox"
}

// pastOutboxLeaf reports whether err is a direct insert's id outside the partition table's
// bound, and forgets the partition if so.
func (s *Store) pastOutboxLeaf(err error, table string) bool {
	if table == "outbox" {
		return false
	}
	pqErr := pq.As(err, pqerror.CheckViolation)
	if pqErr == nil || pqErr.Table != table {
		return false
	}
	s.leaf.name.Store(nil)
	return true
}
