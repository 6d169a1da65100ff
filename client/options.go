package client

import (
	"encoding/json"
	"strings"
	"time"
)

// KeyOptions are how a call that creates or claims something (ClaimRuns, CreateDagRun,
// CreateWebhook) sends its request.
type KeyOptions struct {
	// IdempotencyKey makes the call safe to retry; a random one is sent when it is empty.
	// The same key with the same request answers what the first call did.
	IdempotencyKey string
}

// CreateOptions are how CreateBackfill sends its request.
type CreateOptions struct {
	// IdempotencyKey makes the call safe to retry; a random one is sent when it is empty.
	IdempotencyKey string
	// IfPlan, when not empty, creates the backfill only if its plan still has this hash
	// (the PlanHash of a DryRunBackfill); otherwise the call is code plan_changed, with
	// CurrentPlanHash. It is sent as the If-Match header.
	IfPlan string
	// Actor, when not empty, names who asks (the X-Actor header): the backfill's created_by
	// where the service has no per-user identity.
	Actor string
}

// RetryOptions are how RetryBackfill sends its request; the fields mean what they mean in
// CreateOptions (IfPlan is the plan hash of the failed and canceled slots to retry).
type RetryOptions struct {
	IdempotencyKey string
	IfPlan         string
	Actor          string
}

// ifMatch is a plan hash as the If-Match header carries it (a quoted entity tag), nil for
// none.
func ifMatch(planHash string) *string {
	if planHash == "" {
		return nil
	}
	quoted := `"` + planHash + `"`
	return &quoted
}

// Field is one field of a request that tells "leave it" from "clear it": the zero Field is
// left out (the service keeps what it has), Set sends a value and Null sends null (no limit,
// no description, no pool). The generated request types cannot say null: their optional
// fields are omitted when nil.
type Field[T any] struct {
	value   T
	present bool
	null    bool
}

// Set is a Field that sends v.
func Set[T any](v T) Field[T] { return Field[T]{value: v, present: true} }

// Null is a Field that sends null.
func Null[T any]() Field[T] { return Field[T]{present: true, null: true} }

// IsSet reports whether the field is sent (a value or null).
func (f Field[T]) IsSet() bool { return f.present }

// Value is the value the field sends, and false when it sends null or nothing.
func (f Field[T]) Value() (T, bool) { return f.value, f.present && !f.null }

// BackfillChanges is PatchBackfill's body: the settings of an active backfill to change;
// fields left zero keep their value.
type BackfillChanges struct {
	MaxActiveRuns Field[int32]
	// MaxFailedRuns Null: no failure budget.
	MaxFailedRuns Field[int32]
	// Description Null: none.
	Description Field[string]
	// Pool moves the backfill's runs to this pool (Null: none); running runs go on.
	Pool Field[string]
	// Priority (-10..10) ranks the backfill in the next claims.
	Priority Field[int32]
}

// MarshalJSON writes the changes as a JSON merge patch.
func (b BackfillChanges) MarshalJSON() ([]byte, error) {
	return fields{
		{"max_active_runs", b.MaxActiveRuns.json()},
		{"max_failed_runs", b.MaxFailedRuns.json()},
		{"description", b.Description.json()},
		{"pool", b.Pool.json()},
		{"priority", b.Priority.json()},
	}.marshal()
}

// RetryRequest is RetryBackfill's body: the new backfill's settings; fields left zero take
// the parent's.
type RetryRequest struct {
	MaxActiveRuns Field[int32]
	// MaxFailedRuns Null: no failure budget.
	MaxFailedRuns Field[int32]
	DagRunConf    Field[Conf]
	Description   Field[string]
	// Pool Null: none.
	Pool Field[string]
	// CodeRef replaces the parent's code_ref.
	CodeRef Field[string]
	// Reason is the retry's own (never the parent's).
	Reason Field[string]
	// LogicalDates retries exactly these slots of the parent's window instead of the failed
	// and canceled ones.
	LogicalDates Field[[]time.Time]
	// Priority replaces the parent's priority.
	Priority Field[int32]
}

// MarshalJSON writes the request with only the fields that are set.
func (r RetryRequest) MarshalJSON() ([]byte, error) {
	return fields{
		{"max_active_runs", r.MaxActiveRuns.json()},
		{"max_failed_runs", r.MaxFailedRuns.json()},
		{"dag_run_conf", r.DagRunConf.json()},
		{"description", r.Description.json()},
		{"pool", r.Pool.json()},
		{"code_ref", r.CodeRef.json()},
		{"reason", r.Reason.json()},
		{"logical_dates", r.LogicalDates.json()},
		{"priority", r.Priority.json()},
	}.marshal()
}

// json is the field's JSON value: nil when it is left out, null or the value otherwise.
func (f Field[T]) json() func() ([]byte, error) {
	switch {
	case !f.present:
		return nil
	case f.null:
		return func() ([]byte, error) { return []byte("null"), nil }
	}
	return func() ([]byte, error) { return json.Marshal(f.value) }
}

// fields are the members of a JSON object in order; a nil value is left out.
type fields []struct {
	name  string
	value func() ([]byte, error)
}

func (fs fields) marshal() ([]byte, error) {
	var b strings.Builder
	b.WriteByte('{')
	for _, f := range fs {
		if f.value == nil {
			continue
		}
		v, err := f.value()
		if err != nil {
			return nil, err
		}
		if b.Len() > 1 {
			b.WriteByte(',')
		}
		name, _ := json.Marshal(f.name)
		b.Write(name)
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteByte('}')
	return []byte(b.String()), nil
}

// ReportDeferred is the report state that hands a run back to be tried again after
// RunReport.RetryAfter, with its attempt unchanged. It is a report's word, not a run's
// state: the run itself becomes queued (DagRun.NotBefore says until when).
const ReportDeferred DagRunState = DagRunState(DagRunReportStateDeferred)

// RunReport is ReportRun's body: a run's outcome.
type RunReport struct {
	// State is success, failed or canceled, or ReportDeferred.
	State DagRunState
	// RetryAfter is how long a deferred run waits (whole seconds, 1 s to 24 h); only with
	// ReportDeferred.
	RetryAfter time.Duration
	// WorkerID, when not empty, is the worker that must still hold the run's lease (else
	// lease_lost); empty marks the run as an operator would.
	WorkerID string
	// Note says why (at most 4,096 characters); empty sends none.
	Note string
	// Traceparent, when not empty, is sent as the W3C traceparent header: a claimed run's
	// (DagRun.Traceparent), so that the report joins the run's trace.
	Traceparent string
}

func (r RunReport) patch() DagRunPatch {
	body := DagRunPatch{State: DagRunReportState(r.State)}
	if r.RetryAfter > 0 {
		secs := int64((r.RetryAfter + time.Second - 1) / time.Second)
		body.RetryAfterSeconds = &secs
	}
	if r.WorkerID != "" {
		body.WorkerId = &r.WorkerID
	}
	if r.Note != "" {
		body.Note = &r.Note
	}
	return body
}
