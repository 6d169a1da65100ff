package repo

import (
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/backfillsvc/backfill/domain"
	"github.com/backfillsvc/backfill/internal/testkit/pgtest"
	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"
)

// quotedStates pulls the state names out of an expression as pg_get_expr or
// pg_get_constraintdef prints it: state = ANY (ARRAY['running'::text, ...]).
var quotedStates = regexp.MustCompile(`'([a-z_]+)'::text`)

func statesIn(t *testing.T, expr string) []domain.BackfillState {
	t.Helper()
	var out []domain.BackfillState
	for _, m := range quotedStates.FindAllStringSubmatch(expr, -1) {
		out = append(out, domain.BackfillState(m[1]))
	}
	require.NotEmpty(t, out, "no states in %q", expr)
	return out
}

// The active states are written in Go once (domain.ActiveBackfillStates) and in the schema
// in the predicates of the partial indexes that make "one active backfill per DAG" true; the
// terminal states in the CHECK constraints. The two must name the same states: a state
// added to one side only would let two backfills of a DAG be active at once, or make the
// sweep blind to one.
func TestActiveStatesMatchSchema(t *testing.T) {
	t.Parallel()
	db, _ := pgtest.Open(t)
	ctx := context.Background()

	for _, index := range []string{"backfills_active_by_id", "backfills_one_active_per_dag"} {
		var pred string
		require.NoError(t, db.GetContext(ctx, &pred, `
			SELECT pg_get_expr(i.indpred, i.indrelid) FROM pg_index i
			WHERE i.indexrelid = $1::regclass`, index), index)
		require.ElementsMatch(t, domain.ActiveBackfillStates, statesIn(t, pred), "predicate of %s: %s", index, pred)
	}

	check := func(name string) []domain.BackfillState {
		var def string
		require.NoError(t, db.GetContext(ctx, &def, `
			SELECT pg_get_constraintdef(oid) FROM pg_constraint
			WHERE conrelid = 'backfills'::regclass AND conname = $1`, name), name)
		return statesIn(t, def)
	}
	all := check("backfills_state_valid")
	require.Subset(t, all, domain.ActiveBackfillStates)
	var rest []domain.BackfillState
	for _, s := range all {
		if !s.Active() {
			rest = append(rest, s)
		}
	}
	require.ElementsMatch(t, domain.TerminalBackfillStates, rest, "the states the schema allows that are not active")
	require.ElementsMatch(t, domain.TerminalBackfillStates, check("backfills_completed_at_iff_terminal"))
	require.ElementsMatch(t, domain.TerminalBackfillStates, check("backfills_terminal_has_no_unfinished_runs"))
}

func TestActiveStatesSQLLiteral(t *testing.T) {
	require.Equal(t, "('running', 'paused', 'canceling')", activeStatesSQL)
}

// The SQL built from the Go list still reads the partial indexes: the planner uses a partial
// index only when it can prove the query's predicate implies the index's, so this fails if
// the two spell the states differently. Sequential scans are priced out so that an empty
// table's plan shows which index could serve.
func TestActiveStatesSQLUsesPartialIndexes(t *testing.T) {
	t.Parallel()
	db, _ := pgtest.Open(t)
	ctx := context.Background()
	explain := func(t *testing.T, stmt string, args ...any) string {
		t.Helper()
		tx, err := db.BeginTxx(ctx, nil)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback() }()
		_, err = tx.ExecContext(ctx, `SET LOCAL enable_seqscan = off`)
		require.NoError(t, err)
		var lines []string
		require.NoError(t, sqlx.SelectContext(ctx, tx, &lines, `EXPLAIN `+stmt, args...))
		return strings.Join(lines, "\n")
	}
	for _, tc := range []struct {
		name  string
		stmt  string
		args  []any
		index string
	}{
		{"active backfill of a DAG", activeBackfillOfDagSQL, []any{"d"}, "backfills_one_active_per_dag"},
		{"sweep finalize", sweepFinalizeSQL, []any{100}, "backfills_active_by_id"},
		{"state counts", stateCountsSQL, nil, "backfills_active_by_id"},
		{"list active backfills", `SELECT id` + backfillListFilter + ` ORDER BY id LIMIT 50`,
			[]any{nil, nil, true}, "backfills_active_by_id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan := explain(t, tc.stmt, tc.args...)
			require.Contains(t, plan, tc.index, plan)
		})
	}
}
