-- Dependencies between DAGs (contract: "Backfilling a pipeline"): a DAG names its upstreams,
-- each with a mapping (which upstream runs a run waits for) and a lookback, and may depend on
-- its own past. Backfill groups read these edges to write run-to-run dependencies.
--
-- An edge goes with its DAG (ON DELETE CASCADE on dag_id). The upstream side restricts: a DAG
-- that others name cannot be deleted (the API answers 409 dag_has_downstreams before the
-- database would refuse). Edges are looked up both ways: a DAG's upstreams by the primary key,
-- its downstreams by dag_dependencies_by_upstream.

-- +goose Up
ALTER TABLE dags ADD COLUMN depends_on_past boolean NOT NULL DEFAULT false;

CREATE TABLE dag_dependencies (
    dag_id          text     NOT NULL REFERENCES dags (dag_id) ON DELETE CASCADE,
    upstream_dag_id text     NOT NULL REFERENCES dags (dag_id),
    -- position keeps the order the DAG's definition lists its upstreams in.
    position        smallint NOT NULL,
    mapping         text     NOT NULL CHECK (mapping IN ('overlap', 'all')),
    lookback        integer  NOT NULL CHECK (lookback BETWEEN 0 AND 1000),
    PRIMARY KEY (dag_id, upstream_dag_id),
    -- A DAG that waits for itself is a cycle; the API names it (422 dependency_cycle).
    CONSTRAINT dag_dependencies_not_self CHECK (dag_id <> upstream_dag_id)
);
CREATE INDEX dag_dependencies_by_upstream ON dag_dependencies (upstream_dag_id);

-- +goose Down
DROP TABLE dag_dependencies;
ALTER TABLE dags DROP COLUMN depends_on_past;
