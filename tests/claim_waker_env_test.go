package tests

import (
	"context"
	"log/slog"
	"net/url"
	"testing"

	"github.com/backfillsvc/backfill/events"
	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"
)

// claimWakerApp names the waker's LISTEN session in pg_stat_activity, so that a test that
// waits for the service's pooled sessions to be replaced can tell the long-lived LISTEN
// session apart (it runs no statement the test is about).
const claimWakerApp = "backfill_claim_waker"

// withApplicationName sets application_name on a URL DSN.
func withApplicationName(t testing.TB, dsn, name string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	q := u.Query()
	q.Set("application_name", name)
	u.RawQuery = q.Encode()
	return u.String()
}

// startClaimWaker wires a replica's waiting claims as cmd/api does: its store's changes kick
// the waker, which wakes local waiters and NOTIFYs (through db) every replica's waker, which
// LISTENs on dsn (the direct DSN: behind a pooler too).
func startClaimWaker(t testing.TB, db *sqlx.DB, dsn string, logger *slog.Logger) *events.ClaimWaker {
	t.Helper()
	n := events.NewClaimableNotifier(func(ctx context.Context, statement string) error {
		_, err := db.ExecContext(ctx, statement)
		return err
	}, 0, logger)
	require.NoError(t, n.Start(context.Background()))
	t.Cleanup(n.Stop)
	w := events.NewClaimWaker(withApplicationName(t, dsn, claimWakerApp), n.Kick, logger)
	require.NoError(t, w.Start(context.Background()))
	t.Cleanup(w.Stop)
	t.Cleanup(w.EndWaits) // runs first: a waiting claim does not hold srv.Close up
	return w
}
