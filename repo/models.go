package repo

import (
	"database/sql/driver"
	"fmt"
	"strings"
	"time"

	"github.com/backfillsvc/backfill/domain"
	"github.com/lib/pq"
)

// Dag is a schedule that runs are made for.
type Dag struct {
	DagID         string    `db:"dag_id"`
	Schedule      string    `db:"schedule"`
	Timezone      string    `db:"timezone"`
	MaxActiveRuns int       `db:"max_active_runs"`
	IsPaused      bool      `db:"is_paused"`
	Description   *string   `db:"description"`
	CreatedAt     time.Time `db:"created_at"`
	UpdatedAt     time.Time `db:"updated_at"`
	DependsOnPast bool      `db:"depends_on_past"`
	// Upstreams and Downstreams are read by the API's reads (dagAPIColumns) only.
	Upstreams   Upstreams      `db:"upstreams"`
	Downstreams pq.StringArray `db:"downstreams"`
}

// dagColumns selects a Dag without its dependencies; keep it in step with the struct.
const dagColumns = `dag_id, schedule, timezone, max_active_runs, is_paused, description, created_at, updated_at, depends_on_past`

// Run is one execution of a DAG for one logical date.
type Run struct {
	ID                int64           `db:"id"`
	DagID             string          `db:"dag_id"`
	RunID             string          `db:"run_id"`
	LogicalDate       time.Time       `db:"logical_date"`
	DataIntervalStart time.Time       `db:"data_interval_start"`
	DataIntervalEnd   time.Time       `db:"data_interval_end"`
	State             domain.RunState `db:"state"`
	RunType           domain.RunType  `db:"run_type"`
	BackfillID        *int64          `db:"backfill_id"`
	Conf              JSON            `db:"conf"`
	Attempt           int             `db:"attempt"`
	WorkerID          *string         `db:"worker_id"`
	QueuedAt          *time.Time      `db:"queued_at"`
	StartDate         *time.Time      `db:"start_date"`
	EndDate           *time.Time      `db:"end_date"`
	LeaseExpiresAt    *time.Time      `db:"lease_expires_at"`
	// Note is what the last report said about the run; a new claim clears it.
	Note *string `db:"note"`
	// CodeRef is the run's backfill's code_ref; only a claim reads it (claimCodeRef).
	CodeRef *string `db:"code_ref"`
	// NotBefore is set on a queued run that a report deferred: no claim hands it out before.
	NotBefore *time.Time `db:"not_before"`
}

// runColumns selects a Run; keep it in step with the struct.
const runColumns = `id, dag_id, run_id, logical_date, data_interval_start, data_interval_end, state,
	run_type, backfill_id, conf, attempt, worker_id, queued_at, start_date, end_date, lease_expires_at, note, not_before`

// prefixed qualifies each column of a list like runColumns with a table alias.
func prefixed(alias, columns string) string {
	parts := strings.Split(columns, ",")
	for i, c := range parts {
		parts[i] = alias + strings.TrimSpace(c)
	}
	return strings.Join(parts, ", ")
}

// Progress counts a backfill's slots by the state of their runs.
type Progress struct {
	Queued   int64 `db:"num_queued"`
	Running  int64 `db:"num_running"`
	Success  int64 `db:"num_success"`
	Failed   int64 `db:"num_failed"`
	Canceled int64 `db:"num_canceled"`
	Skipped  int64 `db:"num_skipped"`
	// Blocked counts the queued runs that wait for another run (a group's); they are in
	// Queued too.
	Blocked int64 `db:"num_blocked"`
}

// Total is the number of slots.
func (p Progress) Total() int64 {
	return p.Queued + p.Running + p.Success + p.Failed + p.Canceled + p.Skipped
}

// Backfill is a request to run a DAG over a window of past dates.
type Backfill struct {
	ID                int64                    `db:"id"`
	DagID             string                   `db:"dag_id"`
	FromDate          time.Time                `db:"from_date"`
	ToDate            time.Time                `db:"to_date"`
	RunBackwards      bool                     `db:"run_backwards"`
	DagRunConf        JSON                     `db:"dag_run_conf"`
	ReprocessBehavior domain.ReprocessBehavior `db:"reprocess_behavior"`
	MaxActiveRuns     int                      `db:"max_active_runs"`
	Description       *string                  `db:"description"`
	State             domain.BackfillState     `db:"state"`
	CreatedAt         time.Time                `db:"created_at"`
	UpdatedAt         time.Time                `db:"updated_at"`
	CompletedAt       *time.Time               `db:"completed_at"`
	// MaxFailedRuns is the failure budget: nil for none.
	MaxFailedRuns *int `db:"max_failed_runs"`
	// PauseReason is set while paused, nil otherwise.
	PauseReason *domain.PauseReason `db:"pause_reason"`
	// PlanHash digests the plan the backfill was created from (see domain.PlanHash).
	PlanHash *string `db:"plan_hash"`
	// ParentBackfillID is the backfill a retry was made from.
	ParentBackfillID *int64 `db:"parent_backfill_id"`
	// Pool is the pool the backfill's runs are claimed in; nil for none.
	Pool *string `db:"pool"`
	// CodeRef is the code the backfill's runs run, fixed at creation; nil for none.
	CodeRef *string `db:"code_ref"`
	// CreatedBy is who created the backfill (nil when unknown), Reason why (nil for none).
	CreatedBy *string `db:"created_by"`
	Reason    *string `db:"reason"`
	// Priority orders claims between backfills (claim_priority.go).
	Priority int `db:"priority"`
	// GroupID is the group the backfill is a member of; nil for none.
	GroupID *int64 `db:"group_id"`
	// ETA is eta_seconds (domain.ETA); only the reads that select the pace (paceColumns)
	// set it: BackfillGetWithETA, BackfillProgressMany.
	ETA *float64 `db:"-"`
	Progress
}

const backfillColumns = `id, dag_id, from_date, to_date, run_backwards, dag_run_conf, reprocess_behavior,
	max_active_runs, description, state, created_at, updated_at, completed_at,
	num_queued, num_running, num_success, num_failed, num_canceled, num_skipped,
	max_failed_runs, pause_reason, plan_hash, parent_backfill_id, pool, code_ref, created_by, reason, priority,
	num_blocked, group_id`

// scanDest is b's fields in backfillColumns order. The status read scans through it rather
// than sqlx's mapping by column name, which costs reflection on every poll.
func (b *Backfill) scanDest() []any {
	return []any{&b.ID, &b.DagID, &b.FromDate, &b.ToDate, &b.RunBackwards, &b.DagRunConf, &b.ReprocessBehavior,
		&b.MaxActiveRuns, &b.Description, &b.State, &b.CreatedAt, &b.UpdatedAt, &b.CompletedAt,
		&b.Queued, &b.Running, &b.Success, &b.Failed, &b.Canceled, &b.Skipped,
		&b.MaxFailedRuns, &b.PauseReason, &b.PlanHash, &b.ParentBackfillID, &b.Pool, &b.CodeRef, &b.CreatedBy, &b.Reason, &b.Priority,
		&b.Blocked, &b.GroupID}
}

// BackfillSlot is one slot of a backfill as its listing shows it.
type BackfillSlot struct {
	SortOrdinal     int              `db:"sort_ordinal"`
	LogicalDate     time.Time        `db:"logical_date"`
	DagRunID        *int64           `db:"dag_run_id"`
	RunID           *string          `db:"run_id"`
	State           *domain.RunState `db:"state"`
	ExceptionReason *string          `db:"exception_reason"`
	// Attempt and Note are the run's, while this backfill still owns it.
	Attempt *int    `db:"attempt"`
	Note    *string `db:"note"`
	// BlockedBy is how many runs the slot's queued run still waits for (a group's); 0 once it
	// started or ended, nil for a skipped slot.
	BlockedBy *int `db:"blocked_by"`
}

// Heartbeat is the answer to a lease extension.
type Heartbeat struct {
	LeaseExpiresAt  time.Time
	CancelRequested bool
}

// ListParams pages a listing.
type ListParams struct {
	Limit  int
	Offset int
	// After, when set, is the sort key of the entry just before the page, as text (an id, a
	// sort ordinal, a logical date in RFC 3339, a dag_id): the page starts after it. Keyset
	// paging reads the list's index from that key, so a deep page costs what the first does,
	// and entries inserted or removed before it do not shift it.
	After *string
}

// JSON is a jsonb value that may be NULL (nil). json.RawMessage cannot scan a NULL.
type JSON []byte

// Value implements driver.Valuer: a JSON document goes to a jsonb parameter as text (lib/pq
// would send a []byte as bytea), and none, or JSON's null, as NULL.
func (j JSON) Value() (driver.Value, error) {
	if len(j) == 0 || string(j) == "null" {
		return nil, nil
	}
	return string(j), nil
}

// Scan implements sql.Scanner.
func (j *JSON) Scan(src any) error {
	switch v := src.(type) {
	case nil:
		*j = nil
	case []byte:
		*j = append(JSON(nil), v...)
	case string:
		*j = JSON(v)
	default:
		return fmt.Errorf("repo.JSON: cannot scan %T", src)
	}
	return nil
}
