package invariants

import (
	"context"
	"fmt"

	"github.com/jmoiron/sqlx"
)

// InstallClaimAudit adds to a test database a trigger that runs at the COMMIT of every
// transaction that starts a backfill run and records the backfill's running count next to
// the max_active_runs and state in force at that moment. The claim still holds its lock on the
// backfill row then, and a PATCH, a pause or a failing report must take that row to change
// them, so each record is exactly "the limit and state in force when the claim committed":
// a claim that committed after a pause (by a person or by the failure budget) shows it.
//
// Once a backfill's max_active_runs can be lowered while runs are running, "running <=
// max_active_runs" stops being a property of a snapshot (running runs above a lowered limit go
// on). With the audit installed, Check verifies the claims themselves instead. Never install it
// in production: it adds a query to every claim.
func InstallClaimAudit(ctx context.Context, db *sqlx.DB) error {
	_, err := db.ExecContext(ctx, `
		CREATE TABLE invariants_claim_audit (backfill_id bigint, running int, max_active_runs int, state text);
		CREATE FUNCTION invariants_claim_audit() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			INSERT INTO invariants_claim_audit
			SELECT b.id, (SELECT count(*) FROM dag_runs r WHERE r.backfill_id = b.id AND r.state = 'running'),
			       b.max_active_runs, b.state
			FROM backfills b WHERE b.id = NEW.backfill_id;
			RETURN NULL;
		END $$;
		CREATE CONSTRAINT TRIGGER invariants_claim_audit AFTER UPDATE ON dag_runs
			DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
			WHEN (NEW.state = 'running' AND OLD.state <> 'running' AND NEW.backfill_id IS NOT NULL)
			EXECUTE FUNCTION invariants_claim_audit();`)
	if err != nil {
		return fmt.Errorf("install claim audit: %w", err)
	}
	return installPoolAudit(ctx, db)
}

// claimAuditInstalled reports whether InstallClaimAudit ran on this database.
func claimAuditInstalled(ctx context.Context, q sqlx.QueryerContext) (bool, error) {
	var ok bool
	err := sqlx.GetContext(ctx, q, &ok, `SELECT to_regclass('invariants_claim_audit') IS NOT NULL`)
	return ok, err
}
