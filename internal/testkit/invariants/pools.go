package invariants

import (
	"context"
	"fmt"

	"github.com/jmoiron/sqlx"
)

// poolOfRun is the pool a run is claimed in, as SQL over dag_runs r LEFT JOIN backfills b:
// a backfill's runs are in the backfill's pool, a manual run names its own.
const poolOfRun = `CASE WHEN r.backfill_id IS NULL THEN r.pool ELSE b.pool END`

// installPoolAudit adds a trigger that runs at the COMMIT of every transaction that starts a
// run in a pool and records the pool's running runs, counted afresh from dag_runs, next to
// its slots at that moment, with the run's start time and the pool's pace then in force. The claim still holds its lock on the pool row then, and every
// claim that starts a run in the pool must take that lock, so no other start can slip in
// between: each record is the pool as the claim left it. Lowering slots may leave a pool
// above its slots (nothing is stopped), so "running <= slots" is checked here, at the claims,
// and not in a snapshot.
func installPoolAudit(ctx context.Context, db *sqlx.DB) error {
	_, err := db.ExecContext(ctx, `
		CREATE TABLE invariants_pool_audit (run_id bigint, pool text, running int, slots int,
			started_at timestamptz, rate_runs int, rate_per text);
		CREATE FUNCTION invariants_pool_audit() RETURNS trigger LANGUAGE plpgsql AS $$
		DECLARE
			p text;
		BEGIN
			SELECT `+poolOfRun+` INTO p FROM dag_runs r LEFT JOIN backfills b ON b.id = r.backfill_id
			WHERE r.id = NEW.id;
			IF p IS NULL THEN
				RETURN NULL;
			END IF;
			INSERT INTO invariants_pool_audit
			SELECT NEW.id, p,
			       (SELECT count(*) FROM dag_runs r LEFT JOIN backfills b ON b.id = r.backfill_id
			        WHERE r.state = 'running' AND `+poolOfRun+` = p),
			       (SELECT slots FROM pools WHERE name = p),
			       NEW.start_date,
			       (SELECT rate_runs FROM pools WHERE name = p),
			       (SELECT rate_per FROM pools WHERE name = p);
			RETURN NULL;
		END $$;
		CREATE CONSTRAINT TRIGGER invariants_pool_audit AFTER UPDATE ON dag_runs
			DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
			WHEN (NEW.state = 'running' AND OLD.state <> 'running')
			EXECUTE FUNCTION invariants_pool_audit();`)
	if err != nil {
		return fmt.Errorf("install pool audit: %w", err)
	}
	return nil
}

// checkPools adds invariants (h) and, with the audit, (i) to a Check.
func checkPools(check func(name, query string, args ...any), audited bool) {
	check("(h) pool counters equal a count of the pool's runs", `
		WITH counted AS (
			SELECT `+poolOfRun+` AS pool,
			       count(*) FILTER (WHERE r.state = 'queued')  AS queued,
			       count(*) FILTER (WHERE r.state = 'running') AS running
			FROM dag_runs r LEFT JOIN backfills b ON b.id = r.backfill_id
			WHERE r.state IN ('queued', 'running')
			GROUP BY 1
		)
		SELECT p.name, p.num_queued, p.num_running, coalesce(c.queued, 0) AS queued, coalesce(c.running, 0) AS running
		FROM pools p LEFT JOIN counted c ON c.pool = p.name
		WHERE p.num_queued <> coalesce(c.queued, 0) OR p.num_running <> coalesce(c.running, 0)`)
	if audited {
		check("(h) claim committed above its pool's slots", `
			SELECT run_id, pool, running, slots FROM invariants_pool_audit WHERE running > slots`)
		// The window that holds the most starts can be taken to end at one of them, x: the
		// starts in it are those in (x - per, x]. The pace in force at x's commit applies.
		check("(i) more starts in a window of a pool's pace than it allows", `
			SELECT x.run_id, x.pool, x.started_at, x.rate_runs, x.rate_per, count(*) AS starts
			FROM invariants_pool_audit x
			JOIN invariants_pool_audit y ON y.pool = x.pool
			 AND y.started_at > x.started_at - ('1 ' || x.rate_per)::interval AND y.started_at <= x.started_at
			WHERE x.rate_runs IS NOT NULL
			GROUP BY x.run_id, x.pool, x.started_at, x.rate_runs, x.rate_per
			HAVING count(*) > x.rate_runs`)
	}
}
