package domain

// RunType is how a DAG run came to be, as dag_runs.run_type and the first part of its run id
// say (Airflow's names).
type RunType string

// Run types.
const (
	RunTypeManual   RunType = "manual"
	RunTypeBackfill RunType = "backfill"
)

// PauseReason says why a backfill is paused, as backfills.pause_reason holds it; a backfill
// that is not paused has none.
type PauseReason string

// Pause reasons.
const (
	// PauseReasonUser: a client paused it.
	PauseReasonUser PauseReason = "user"
	// PauseReasonFailureBudget: its failed runs reached max_failed_runs.
	PauseReasonFailureBudget PauseReason = "failure_budget"
)
