-- backfill_eta_seconds (00031) in PL/pgSQL, with the same result.
--
-- As a SQL function it was not inlined (its body reads dag_runs), and PostgreSQL plans a
-- SQL function's body anew in every statement that calls it: the status poll, a prepared
-- statement, spent about 0.3 ms of the database's CPU planning the ETA on each GET (pgbench
-- -M prepared on one running backfill: 0.42 ms a read, 0.10 ms without the ETA). PL/pgSQL
-- keeps the plan of its query for the session: 0.13 ms.

-- +goose Up
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION backfill_eta_seconds(b backfills) RETURNS double precision
LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF b.state <> 'running' THEN
        RETURN NULL;
    END IF;
    IF b.num_queued + b.num_running = 0 THEN
        RETURN 0;
    END IF;
    RETURN (
        SELECT CASE WHEN w.n >= 2 AND w.span > 0 THEN
            round(((b.num_queued + b.num_running) * w.span / w.n)::numeric, 1)::double precision
        END
        FROM (
            SELECT count(*) AS n,
                   extract(epoch FROM backfill_now() - CASE
                       WHEN count(*) = 500 THEN min(s.end_date)
                       ELSE greatest(b.pace_since, backfill_now() - interval '5 minutes')
                   END)::double precision AS span
            FROM (
                SELECT r.end_date FROM dag_runs r
                WHERE r.dag_id = b.dag_id AND r.state = 'success' AND r.backfill_id = b.id
                  AND r.end_date >= greatest(b.pace_since, backfill_now() - interval '5 minutes')
                ORDER BY r.end_date DESC LIMIT 500
            ) s
        ) w);
END
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION backfill_eta_seconds(b backfills) RETURNS double precision
LANGUAGE sql STABLE AS $$
    SELECT CASE
        WHEN b.state <> 'running' THEN NULL
        WHEN b.num_queued + b.num_running = 0 THEN 0::double precision
        ELSE (
            SELECT CASE WHEN w.n >= 2 AND w.span > 0 THEN
                round(((b.num_queued + b.num_running) * w.span / w.n)::numeric, 1)::double precision
            END
            FROM (
                SELECT count(*) AS n,
                       extract(epoch FROM backfill_now() - CASE
                           WHEN count(*) = 500 THEN min(s.end_date)
                           ELSE greatest(b.pace_since, backfill_now() - interval '5 minutes')
                       END)::double precision AS span
                FROM (
                    SELECT r.end_date FROM dag_runs r
                    WHERE r.dag_id = b.dag_id AND r.state = 'success' AND r.backfill_id = b.id
                      AND r.end_date >= greatest(b.pace_since, backfill_now() - interval '5 minutes')
                    ORDER BY r.end_date DESC LIMIT 500
                ) s
            ) w)
    END
$$;
-- +goose StatementEnd
