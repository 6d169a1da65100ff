package repo

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/backfillsvc/backfill/internal/testkit/pgtest"
	"github.com/stretchr/testify/require"
)

// planNode is the part of EXPLAIN (FORMAT JSON) these tests read.
type planNode struct {
	NodeType      string     `json:"Node Type"`
	Relation      string     `json:"Relation Name"`
	Alias         string     `json:"Alias"`
	IndexName     string     `json:"Index Name"`
	TotalCost     float64    `json:"Total Cost"`
	ActualRows    float64    `json:"Actual Rows"`
	ActualLoops   float64    `json:"Actual Loops"`
	RemovedFilter float64    `json:"Rows Removed by Filter"`
	Plans         []planNode `json:"Plans"`
}

// ownerRowsRead sums the rows that scans of an owner table returned or filtered out, leaving
// out the claimed runs' code_ref reads (aliasRowsRead).
func (n planNode) ownerRowsRead(table string) float64 {
	var total float64
	if n.Relation == table && n.Alias != codeRefAlias {
		total += (n.ActualRows + n.RemovedFilter) * n.ActualLoops
	}
	for _, c := range n.Plans {
		total += c.ownerRowsRead(table)
	}
	return total
}

// codeRefAlias names the backfills read of claimCodeRef.
const codeRefAlias = "code_ref_of"

// aliasRowsRead sums the rows that scans under an alias returned or filtered out.
func (n planNode) aliasRowsRead(alias string) float64 {
	var total float64
	if n.Alias == alias {
		total += (n.ActualRows + n.RemovedFilter) * n.ActualLoops
	}
	for _, c := range n.Plans {
		total += c.aliasRowsRead(alias)
	}
	return total
}

// The claim reads only owners that can hand out a run, so its cost does not grow with idle or
// saturated owners, and its plan stays cheap enough that PostgreSQL never JIT-compiles it
// (a plan estimated at every claimable owner did: 4.8 s of compilation in one claim). Checked
// behind 1,000 saturated DAGs, 1,000 idle DAGs and 1,000 saturated backfills, with 1,000
// claimable DAGs after them, with the generic plan a prepared statement settles on and with the
// custom plans it tries first.
func TestClaimPlanReadsOnlyClaimableOwners(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, _ := pgtest.Open(t)
	_, err := db.ExecContext(ctx, `
		INSERT INTO dags (dag_id, schedule, timezone, max_active_runs, is_paused, created_at, updated_at)
		SELECT format('d%s', lpad(i::text, 4, '0')), '@daily', 'UTC', 1, false, now(), now()
		FROM generate_series(1, 4001) i;
		-- DAGs 1-1000: one manual run running (the cap), one queued behind it.
		INSERT INTO dag_runs (dag_id, run_id, logical_date, data_interval_start, data_interval_end, state,
			run_type, attempt, worker_id, lease_seconds, lease_expires_at)
		SELECT format('d%s', lpad(i::text, 4, '0')), 'manual__' || j, date '2024-01-01' + j, date '2024-01-01' + j,
			date '2024-01-02' + j, CASE j WHEN 1 THEN 'running' ELSE 'queued' END, 'manual', 1,
			CASE j WHEN 1 THEN 'w' END, CASE j WHEN 1 THEN 300 END, CASE j WHEN 1 THEN now() + interval '1 day' END
		FROM generate_series(1, 1000) i, generate_series(1, 2) j;
		-- DAGs 2001-3000: a backfill each, at its cap, with a run queued behind it.
		INSERT INTO backfills (dag_id, from_date, to_date, run_backwards, reprocess_behavior, max_active_runs,
			state, created_at, updated_at, num_queued, num_running)
		SELECT format('d%s', lpad(i::text, 4, '0')), '2024-01-01', '2024-01-02', false, 'none', 1,
			'running', now(), now(), 1, 1
		FROM generate_series(2001, 3000) i;
		INSERT INTO dag_runs (dag_id, run_id, logical_date, data_interval_start, data_interval_end, state,
			run_type, backfill_id, backfill_sort_ordinal, attempt, worker_id, lease_seconds, lease_expires_at)
		SELECT b.dag_id, 'backfill__' || j, date '2024-01-01' + j, date '2024-01-01' + j, date '2024-01-02' + j,
			CASE j WHEN 1 THEN 'running' ELSE 'queued' END, 'backfill', b.id, j, 1,
			CASE j WHEN 1 THEN 'w' END, CASE j WHEN 1 THEN 300 END, CASE j WHEN 1 THEN now() + interval '1 day' END
		FROM backfills b, generate_series(1, 2) j;
		-- DAGs 1001-2000 are idle. One claimable owner of each kind comes after all the others.
		INSERT INTO dag_runs (dag_id, run_id, logical_date, data_interval_start, data_interval_end, state,
			run_type, attempt)
		VALUES ('d3001', 'manual__x', '2024-01-01', '2024-01-01', '2024-01-02', 'queued', 'manual', 1);
		INSERT INTO backfills (dag_id, from_date, to_date, run_backwards, reprocess_behavior, max_active_runs,
			state, created_at, updated_at, num_queued)
		VALUES ('d3001', '2024-01-01', '2024-01-02', false, 'none', 1, 'running', now(), now(), 1);
		INSERT INTO dag_runs (dag_id, run_id, logical_date, data_interval_start, data_interval_end, state,
			run_type, backfill_id, backfill_sort_ordinal, attempt)
		SELECT 'd3001', 'backfill__x', '2024-02-01', '2024-02-01', '2024-02-02', 'queued', 'backfill', max(id), 1, 1
		FROM backfills;
		-- And 1,000 claimable DAGs after it: a plan estimated at every claimable owner would cost
		-- more than jit_above_cost.
		INSERT INTO dag_runs (dag_id, run_id, logical_date, data_interval_start, data_interval_end, state,
			run_type, attempt)
		SELECT format('d%s', lpad(i::text, 4, '0')), 'manual__x', '2024-01-01', '2024-01-01', '2024-01-02',
			'queued', 'manual', 1
		FROM generate_series(3002, 4001) i;
		ANALYZE`)
	require.NoError(t, err)
	var jitAbove float64
	require.NoError(t, db.GetContext(ctx, &jitAbove, `SELECT current_setting('jit_above_cost')::float8`))

	probes := []struct {
		name        string
		scope       claimScope
		before      string // run in the probe's transaction first
		execute     string
		runs        float64
		dags, fills float64 // at most this many owner rows read
	}{
		// The last parameter is PRIORITY_AGING in seconds. A backfill the claim takes is read
		// twice: once to rank the claimable backfills (backfill_rank), once to lock it.
		{"two manual runs", claimAnyDag, ``, `EXECUTE claim_probe('w2', 300, 2, 600)`, 2, 2, 0},
		{"one DAG", claimOneDag, ``, `EXECUTE claim_probe('w2', 300, 2, 'd3001', 600)`, 2, 1, 2},
		// With every DAG paused, the claim walks past 1,000 saturated backfills to the last one.
		{"backfills", claimAnyDag, `UPDATE dags SET is_paused = true`, `EXECUTE claim_probe('w2', 300, 2, 600)`, 1, 0, 2},
		// With all 1,001 backfills claimable, ranking reads each once and each of the two
		// steps of the walk reads the one it locks, not every ranked backfill again (3,002
		// rows when a step joined the ranked CTE directly).
		{"many claimable backfills", claimAnyDag, `UPDATE dags SET is_paused = true; UPDATE backfills SET max_active_runs = 2`,
			`EXECUTE claim_probe('w2', 300, 2, 600)`, 2, 0, 1001 + 2},
	}
	for _, mode := range []string{"force_generic_plan", "force_custom_plan"} {
		for _, probe := range probes {
			what := mode + ", " + probe.name
			conn, err := db.Connx(ctx)
			require.NoError(t, err)
			tx, err := conn.BeginTxx(ctx, nil)
			require.NoError(t, err)
			_, err = tx.ExecContext(ctx, `SET LOCAL plan_cache_mode = `+mode)
			require.NoError(t, err)
			if probe.before != "" {
				_, err = tx.ExecContext(ctx, probe.before)
				require.NoError(t, err)
			}
			// PREPARE outlives the transaction: DEALLOCATE below.
			_, err = tx.ExecContext(ctx, `PREPARE claim_probe AS `+claimStatement(probe.scope))
			require.NoError(t, err)
			var out string
			require.NoError(t, tx.GetContext(ctx, &out, `EXPLAIN (ANALYZE, FORMAT JSON) `+probe.execute))
			require.NoError(t, tx.Rollback())
			_, err = conn.ExecContext(ctx, `DEALLOCATE claim_probe`)
			require.NoError(t, err)
			require.NoError(t, conn.Close())

			var plans []struct {
				Plan planNode       `json:"Plan"`
				JIT  map[string]any `json:"JIT"`
			}
			require.NoError(t, json.Unmarshal([]byte(out), &plans))
			require.Len(t, plans, 1)
			p := plans[0]
			require.Nil(t, p.JIT, "%s: the claim was JIT-compiled", what)
			require.Less(t, p.Plan.TotalCost, jitAbove, "%s: estimated cost", what)
			require.Equal(t, probe.runs, p.Plan.ActualRows, "%s: runs claimed", what)
			require.LessOrEqual(t, p.Plan.ownerRowsRead("dags"), probe.dags, "%s: DAG rows read", what)
			require.LessOrEqual(t, p.Plan.ownerRowsRead("backfills"), probe.fills, "%s: backfill rows read", what)
			require.LessOrEqual(t, p.Plan.aliasRowsRead(codeRefAlias), probe.runs, "%s: code_ref rows read", what)
		}
	}
}
