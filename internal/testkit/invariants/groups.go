package invariants

// checkGroups adds the promises of backfill groups (contract: "Backfilling a pipeline"):
//
//	(j) a run that waits for others was never started before every one of them succeeded:
//	    a run that has started (running, or ended with a start_date) has every run it waits
//	    for in success, ended no later than it started; blocked_by is, for a queued run, the
//	    count of the runs it waits for that are not success; and num_blocked counts the
//	    backfill's queued runs with blocked_by > 0;
//	(k) a run canceled for an upstream failure waits, directly or transitively, for a run
//	    that ended failed or canceled;
//	(l) a group is terminal exactly when every member is, with completed_at then, and not
//	    succeeded unless every member succeeded.
func checkGroups(check func(name, query string, args ...any)) {
	check("(j) a started run's upstreams all succeeded before it started", `
		SELECT d.run_id, r.state, r.start_date, d.upstream_run_id, u.state AS upstream_state, u.end_date AS upstream_end
		FROM dag_run_dependencies d
		JOIN dag_runs r ON r.id = d.run_id
		JOIN dag_runs u ON u.id = d.upstream_run_id
		WHERE r.start_date IS NOT NULL AND r.state <> 'queued'
		  AND (u.state <> 'success' OR u.end_date > r.start_date)`)

	check("(j) a queued run's blocked_by counts its upstreams not yet succeeded", `
		SELECT r.id, r.blocked_by, count(*) FILTER (WHERE u.state <> 'success') AS waiting
		FROM dag_runs r
		JOIN dag_run_dependencies d ON d.run_id = r.id
		JOIN dag_runs u ON u.id = d.upstream_run_id
		WHERE r.state = 'queued'
		GROUP BY r.id, r.blocked_by
		HAVING r.blocked_by <> count(*) FILTER (WHERE u.state <> 'success')`)

	check("(j) num_blocked counts the queued runs that wait", `
		SELECT b.id, b.num_blocked,
		       (SELECT count(*) FROM dag_runs r WHERE r.backfill_id = b.id AND r.state = 'queued' AND r.blocked_by > 0) AS counted
		FROM backfills b
		WHERE b.state IN ('running', 'paused', 'canceling')
		  AND b.num_blocked <> (SELECT count(*) FROM dag_runs r WHERE r.backfill_id = b.id AND r.state = 'queued' AND r.blocked_by > 0)`)

	check("(k) an upstream_failed cancel follows a failed or canceled upstream", `
		SELECT r.id, r.note FROM dag_runs r
		WHERE r.state = 'canceled' AND r.note LIKE 'upstream_failed: %'
		  AND NOT EXISTS (
			WITH RECURSIVE ups (id) AS (
				SELECT d.upstream_run_id FROM dag_run_dependencies d WHERE d.run_id = r.id
				UNION
				SELECT d.upstream_run_id FROM ups JOIN dag_run_dependencies d ON d.run_id = ups.id)
			SELECT 1 FROM ups JOIN dag_runs u ON u.id = ups.id WHERE u.state IN ('failed', 'canceled'))`)

	check("(l) a group is terminal exactly when its members are", `
		SELECT g.id, g.state, g.completed_at IS NOT NULL AS completed,
		       array_agg(b.state ORDER BY b.id) AS members
		FROM backfill_groups g JOIN backfills b ON b.group_id = g.id
		GROUP BY g.id, g.state, g.completed_at
		HAVING (g.state IN ('succeeded', 'failed', 'canceled')) <> (g.completed_at IS NOT NULL)
		    OR (g.state IN ('succeeded', 'failed', 'canceled') AND bool_or(b.state IN ('running', 'paused', 'canceling')))
		    OR (g.state = 'succeeded' AND bool_or(b.state <> 'succeeded'))`)
}
