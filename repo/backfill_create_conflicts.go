package repo

import (
	"context"
	"fmt"

	"github.com/backfillsvc/backfill/domain"
	"github.com/backfillsvc/backfill/pgrun"
	"github.com/jmoiron/sqlx"
)

// What can stand in a creation's way besides the request itself: the DAG's active backfill,
// and an earlier request under the same idempotency key.

// activeBackfillID looks up the DAG's active backfill, if any. There is at most one:
// backfills_one_active_per_dag, whose predicate this statement repeats so that it reads that
// index.
func activeBackfillID(ctx context.Context, q sqlx.QueryerContext, dagID string) (int64, bool, error) {
	var id int64
	err := sqlx.GetContext(ctx, q, &id, activeBackfillOfDagSQL, dagID)
	if isNoRows(err) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("find active backfill of %q: %w", dagID, err)
	}
	return id, true, nil
}

// alreadyRunning answers a request whose DAG has an active backfill: a replay when that
// backfill is the one an earlier request with the same key created (that request may have
// committed just after our first look at the key), 409 otherwise.
func (s *Store) alreadyRunning(ctx context.Context, key string, hash domain.Fingerprint, activeID int64) (Backfill, bool, error) {
	if b, ok, err := s.idempotentReplay(ctx, key, hash); err != nil || ok {
		return b, ok, err
	}
	return Backfill{}, false, &BackfillAlreadyRunningError{ActiveBackfillID: activeID}
}

// idempotentReplay answers a request whose key is already stored: the backfill as it is now
// when the request is the same, ErrIdempotencyKeyReused when it differs (idemLookup).
func (s *Store) idempotentReplay(ctx context.Context, key string, req domain.Fingerprint) (Backfill, bool, error) {
	if key == "" {
		return Backfill{}, false, nil
	}
	r := idemRequest{key: key, op: opBackfill, fp: req}
	ids, found, err := readTwo(ctx, s, func(ctx context.Context, q pgrun.Queryer) ([]int64, bool, error) { return idemLookup(ctx, q, r) })
	if err != nil || !found {
		return Backfill{}, false, err
	}
	if len(ids) != 1 {
		return Backfill{}, false, fmt.Errorf("idempotency key %q names %d backfills", key, len(ids))
	}
	b, err := idemReplay(ctx, s, ids, func(ctx context.Context, q pgrun.Queryer, ids []int64) (Backfill, error) {
		return s.backfillGetOnce(ctx, q, ids[0]) // idemReplay sends it again if its session dies
	})
	return b, err == nil, err
}

var activeBackfillOfDagSQL = `SELECT id FROM backfills WHERE dag_id = $1 AND state IN ` + activeStatesSQL
