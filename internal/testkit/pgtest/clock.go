package pgtest

// The test clock: a replacement for the service's clock that a test can stop and move.

import (
	"context"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"
)

// testClockSQL replaces the service's clock, backfill_now() (migrations/00002_one_clock.sql),
// in test databases with one that a test can stop and move: while test_clock holds a row, the
// database's time is that row's instant; without one it is now(). SetClock writes the row.
const testClockSQL = `
CREATE TABLE test_clock (singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton), now timestamptz NOT NULL);
CREATE OR REPLACE FUNCTION backfill_now() RETURNS timestamptz
LANGUAGE sql STABLE AS $$ SELECT coalesce((SELECT now FROM test_clock), now()) $$;`

// SetClock stops the database's clock (backfill_now()) at t, in a database made by this
// package. Tests move time forward by calling it again.
func SetClock(ctx context.Context, db sqlx.ExecerContext, t time.Time) error {
	_, err := db.ExecContext(ctx, `
		INSERT INTO test_clock (now) VALUES ($1)
		ON CONFLICT (singleton) DO UPDATE SET now = EXCLUDED.now`, t)
	if err != nil {
		return fmt.Errorf("pgtest: set clock: %w", err)
	}
	return nil
}
