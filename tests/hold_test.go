package tests

import (
	"context"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"
)

// hold opens a transaction of its own, as another client of the database would, and runs
// each statement in it: what they lock stays locked until the caller ends the transaction
// (Rollback or Commit) or the test ends (the cleanup's rollback is then a no-op).
func (e *env) hold(statements ...string) *sqlx.Tx {
	e.t.Helper()
	ctx := context.Background()
	tx, err := e.DB.BeginTxx(ctx, nil)
	require.NoError(e.t, err)
	e.t.Cleanup(func() { _ = tx.Rollback() })
	for _, q := range statements {
		_, err := tx.ExecContext(ctx, q)
		require.NoError(e.t, err, q)
	}
	return tx
}
