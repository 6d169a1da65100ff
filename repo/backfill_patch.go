package repo

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/backfillsvc/backfill/domain"
	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"
)

// BackfillPatchParams changes settings of an active backfill (JSON merge patch: a field is
// changed only when Set*, and a null clears it where the field allows null).
type BackfillPatchParams struct {
	ID             int64
	MaxActiveRuns  *int
	SetMaxFailed   bool
	MaxFailedRuns  *int
	SetDescription bool
	Description    *string
	// SetPool moves the backfill's runs to Pool (nil: to no pool). Running runs keep running;
	// the counter trigger moves their count with them.
	SetPool bool
	Pool    *string
	// Priority, when not nil, is the new priority: the next claim ranks the backfill by it.
	Priority *int
}

// BackfillPatch changes max_active_runs, max_failed_runs, description, pool and priority of an active
// backfill in one guarded statement, which also writes its backfill.updated event. Claims
// lock the backfill row and re-read max_active_runs, so the next claim obeys a new limit;
// running runs above it go on. Lowering max_failed_runs to at or below the failed count does
// not pause by itself: the budget is checked when a run fails (migrations/00006).
//
// A PATCH that changes nothing writes nothing (no row version, no updated_at, no event) and
// answers the backfill as it is.
func (s *Store) BackfillPatch(ctx context.Context, p BackfillPatchParams) (Backfill, error) {
	defer s.eventsMayBeWritten()
	var b Backfill
	patch := func(table string) error {
		stmt := backfillPatchSQL(table, p.SetDescription)
		return s.withRetry(ctx, func(a attempt) error {
			return sqlx.GetContext(a.ctx, s.hot(a.ctx, a.db, stmt), &b, stmt,
				p.ID, p.MaxActiveRuns, p.SetMaxFailed, p.MaxFailedRuns, p.SetDescription, p.Description, p.SetPool, p.Pool,
				a.lockWait, p.Priority)
		})
	}
	table := s.eventTable()
	err := patch(table)
	if err != nil && s.pastOutboxLeaf(err, table) {
		err = patch("outbox") // nothing was written: the statement failed whole
	}
	if err == nil {
		return b, nil
	}
	if errors.Is(poolMissing(err), ErrUnknownPool) {
		return Backfill{}, fmt.Errorf("%w: %s", ErrUnknownPool, *p.Pool)
	}
	if !isNoRows(err) {
		return Backfill{}, fmt.Errorf("patch backfill %d: %w", p.ID, err)
	}
	// Nothing was changed: the backfill is not active (or not there), or already has these
	// settings.
	cur, err := s.BackfillGet(ctx, p.ID)
	if err != nil {
		return Backfill{}, err
	}
	if !cur.State.Active() {
		return Backfill{}, fmt.Errorf("%w: backfill %d is %s", ErrBackfillNotActive, p.ID, cur.State)
	}
	return cur, nil
}

// backfillPatchSQL changes the settings and writes the change's event in the same statement
// (migrations/00016_patch_writes_its_event.sql): raising settings_revision tells the event
// trigger that the statement wrote it. The statement is its own transaction, so its event is
// the transaction's first: its id is the first of the transaction's range (migrations/00014),
// and the row the UPDATE returns is the row at COMMIT. (Run after another event of the same
// transaction, it would fail on the primary key, never write a wrong id.) Its time is the
// change's updated_at, which orders the backfill's changes (migrations/00020).
//
// The event is thin (migrations/00037): what a change can change, taken from the row (zeros as
// NULL, backfill_events_insert), into the outbox's current partition when the store knows it
// (event_leaf.go), else into outbox. A PATCH that sets the description also keeps it, from the
// change's time on, in backfill_descriptions; the others do not pay for that INSERT's setup.
//
// Each statement is prepared once per connection (Store.hot): planning the UPDATE and the
// INSERTs together costs more than running them.
func backfillPatchSQL(table string, described bool) string {
	key := patchStatementKey{table, described}
	if stmt, ok := patchStatements.Load(key); ok {
		return stmt.(string)
	}
	stmt := backfillPatchStatement(patchWritesEvent, described, table)
	patchStatements.Store(key, stmt)
	return stmt
}

type patchStatementKey struct {
	table     string
	described bool
}

// patchStatements caches the PATCH's statement by table and description: a few strings.
var patchStatements sync.Map

// patchWritesEvent is false only in the benchmark's floor (backfill_patch_benchnoevents.go).
var patchWritesEvent = true

// BackfillPatchWithoutEventSQL is the PATCH's statement without its event, for the benchmark
// that measures what the event costs in WAL (cmd/bench, P12): $1 the backfill, $2–$8 and $10
// the settings as BackfillPatch passes them, $9 the lock wait in milliseconds. It returns the
// backfill's columns.
func BackfillPatchWithoutEventSQL() string { return backfillPatchStatement(false, false, "outbox") }

func backfillPatchStatement(withEvent, described bool, table string) string {
	event := `,
	event AS (
		INSERT INTO ` + pq.QuoteIdentifier(table) + ` (id, kind, backfill_id, occurred_at, state, pause_reason, max_active_runs,
			max_failed_runs, priority, pool, num_queued, num_running, num_success, num_failed,
			num_canceled, num_skipped, num_blocked, completed_at)
		SELECT pg_current_xact_id()::text::bigint << 12, event_kind('` + string(domain.EventBackfillUpdated) + `'),
			p.id, p.updated_at, p.state, p.pause_reason, p.max_active_runs, p.max_failed_runs,
			nullif(p.priority, 0), p.pool, nullif(p.num_queued, 0), nullif(p.num_running, 0),
			nullif(p.num_success, 0), nullif(p.num_failed, 0), nullif(p.num_canceled, 0),
			nullif(p.num_skipped, 0), nullif(p.num_blocked, 0), p.completed_at
		FROM patched p)`
	if described {
		event += `,
	described AS (
		INSERT INTO backfill_descriptions (backfill_id, since, description)
		SELECT p.id, p.updated_at, p.description FROM patched p)`
	}
	if !withEvent {
		event = ""
	}
	return `
	WITH patched AS (
		UPDATE backfills SET
			max_active_runs = coalesce($2, max_active_runs),
			max_failed_runs = CASE WHEN $3 THEN $4 ELSE max_failed_runs END,
			description = CASE WHEN $5 THEN $6 ELSE description END,
			pool = CASE WHEN $7 THEN $8::text ELSE pool END,
			priority = coalesce($10::smallint, priority),
			settings_revision = settings_revision + 1,
			updated_at = backfill_change_time(updated_at)
		WHERE id = $1 AND state IN ` + activeStatesSQL + `
			AND (coalesce($2, max_active_runs) IS DISTINCT FROM max_active_runs
				OR (CASE WHEN $3 THEN $4 ELSE max_failed_runs END) IS DISTINCT FROM max_failed_runs
				OR (CASE WHEN $5 THEN $6 ELSE description END) IS DISTINCT FROM description
				OR (CASE WHEN $7 THEN $8::text ELSE pool END) IS DISTINCT FROM pool
				OR coalesce($10::smallint, priority) IS DISTINCT FROM priority)
			AND ` + statementLockWait("$9") + `
		RETURNING ` + backfillColumns + `)` + event + `
	SELECT ` + backfillColumns + ` FROM patched`
}
