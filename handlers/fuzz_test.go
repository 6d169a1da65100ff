package handlers_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/backfillsvc/backfill/domain"
	"github.com/backfillsvc/backfill/handlers"
	"github.com/backfillsvc/backfill/repo"
)

// fakeStore is an in-memory handlers.Store that records every call, checks that what reaches
// it is within the contract's ranges (the handlers must have rejected anything else), and
// answers with plausible values or, when err is set, with that error.
type fakeStore struct {
	mu         sync.Mutex
	err        error
	calls      []string
	writes     []string // write calls that succeeded
	violations []string
}

var _ handlers.Store = (*fakeStore)(nil)

func (f *fakeStore) reset(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.err, f.calls, f.writes, f.violations = err, nil, nil, nil
}

func (f *fakeStore) snapshot() (calls, writes, violations []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...), append([]string(nil), f.writes...), append([]string(nil), f.violations...)
}

// call records a call and returns the configured error; write calls that succeed are
// recorded as writes.
func (f *fakeStore) call(name string, write bool, problems ...string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, name)
	for _, p := range problems {
		if p != "" {
			f.violations = append(f.violations, name+": "+p)
		}
	}
	if f.err == nil && write {
		f.writes = append(f.writes, name)
	}
	return f.err
}

var (
	fakeDagID          = regexp.MustCompile(`^(?:[A-Za-z0-9_-][A-Za-z0-9_.-]{0,249}|\.[A-Za-z0-9_-][A-Za-z0-9_.-]{0,248}|\.\.[A-Za-z0-9_.-]{1,248})$`)
	fakeIdempotencyKey = regexp.MustCompile(`^[\x20-\x7E]{1,255}$`)
)

func checkDagID(id string) string {
	if !fakeDagID.MatchString(id) {
		return fmt.Sprintf("dag_id %q breaks its pattern", id)
	}
	return ""
}

func checkRange(name string, v, lo, hi int) string {
	if v < lo || v > hi {
		return fmt.Sprintf("%s %d outside %d..%d", name, v, lo, hi)
	}
	return ""
}

func checkLen(name, v string, lo, hi int) string {
	if n := utf8.RuneCountInString(v); n < lo || n > hi {
		return fmt.Sprintf("%s of %d characters outside %d..%d", name, n, lo, hi)
	}
	return ""
}

func checkEnum(name, v string, allowed ...string) string {
	for _, a := range allowed {
		if v == a {
			return ""
		}
	}
	return fmt.Sprintf("%s %q not in %v", name, v, allowed)
}

func checkTime(name string, v time.Time) string {
	if v.IsZero() {
		return name + " is zero"
	}
	return ""
}

func checkConf(name string, c repo.JSON) string {
	if c == nil {
		return ""
	}
	var m map[string]any
	if err := json.Unmarshal(c, &m); err != nil || m == nil {
		return fmt.Sprintf("%s %s is not an object", name, c)
	}
	return ""
}

// checkList allows one more than the spec's largest page: a listing reads one entry past its
// page to know whether a next_cursor is due (cursor.go).
func checkList(p repo.ListParams) []string {
	return []string{checkRange("limit", p.Limit, 1, 1001), checkRange("offset", p.Offset, 0, 1<<62)}
}

func checkPos(name string, id int64) string {
	if id < 1 {
		return fmt.Sprintf("%s %d < 1", name, id)
	}
	return ""
}

var (
	runStates      = []string{"queued", "running", "success", "failed", "canceled"}
	backfillStates = []string{"running", "paused", "canceling", "succeeded", "failed", "canceled"}
	fakeTime       = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
)

func fakeRun(dagID, runID string) repo.Run {
	return repo.Run{ID: 1, DagID: dagID, RunID: runID, LogicalDate: fakeTime, DataIntervalStart: fakeTime,
		DataIntervalEnd: fakeTime.Add(time.Hour), State: "queued", RunType: "manual", Attempt: 1, QueuedAt: &fakeTime}
}

func fakeBackfill(id int64, dagID string) repo.Backfill {
	return repo.Backfill{ID: id, DagID: dagID, FromDate: fakeTime, ToDate: fakeTime, ReprocessBehavior: "none",
		MaxActiveRuns: 1, State: "running", CreatedAt: fakeTime, UpdatedAt: fakeTime, Progress: repo.Progress{Queued: 1}}
}

func (f *fakeStore) DagPut(ctx context.Context, p repo.DagPutParams) (repo.Dag, bool, error) {
	desc := ""
	if p.Description != nil {
		desc = checkLen("description", *p.Description, 0, 10000)
	}
	err := f.call("DagPut", true, checkDagID(p.DagID), checkLen("schedule", p.Schedule, 1, 200),
		checkLen("timezone", p.Timezone, 1, 100), checkRange("max_active_runs", p.MaxActiveRuns, 1, 1000), desc)
	return repo.Dag{DagID: p.DagID, Schedule: p.Schedule, Timezone: p.Timezone, MaxActiveRuns: p.MaxActiveRuns,
		IsPaused: p.IsPaused, Description: p.Description, CreatedAt: fakeTime, UpdatedAt: fakeTime}, true, err
}

func (f *fakeStore) DagGet(ctx context.Context, dagID string) (repo.Dag, error) {
	err := f.call("DagGet", false, checkDagID(dagID))
	return repo.Dag{DagID: dagID, Schedule: "@daily", Timezone: "UTC", MaxActiveRuns: 16, CreatedAt: fakeTime, UpdatedAt: fakeTime}, err
}

func (f *fakeStore) DagList(ctx context.Context, p repo.ListParams) ([]repo.Dag, int, error) {
	err := f.call("DagList", false, checkList(p)...)
	return []repo.Dag{{DagID: "d", Schedule: "@daily", Timezone: "UTC", MaxActiveRuns: 16, CreatedAt: fakeTime, UpdatedAt: fakeTime}}, 1, err
}

func (f *fakeStore) RunCreate(ctx context.Context, p repo.RunCreateParams) (repo.Run, bool, error) {
	err := f.call("RunCreate", true, checkDagID(p.DagID), checkTime("logical_date", p.LogicalDate), checkConf("conf", p.Conf),
		checkKey(p.IdempotencyKey))
	return fakeRun(p.DagID, "manual__2024-01-01T00:00:00Z"), false, err
}

// checkKey holds an Idempotency-Key that reached the store to the spec's pattern.
func checkKey(key string) string {
	if key != "" && !fakeIdempotencyKey.MatchString(key) {
		return fmt.Sprintf("Idempotency-Key %q is not 1-255 printable ASCII", key)
	}
	return ""
}

func (f *fakeStore) RunGet(ctx context.Context, dagID, runID string) (repo.Run, error) {
	err := f.call("RunGet", false, checkDagID(dagID), checkLen("run_id", runID, 1, 300))
	return fakeRun(dagID, runID), err
}

func (f *fakeStore) RunList(ctx context.Context, p repo.RunListParams) ([]repo.Run, int, error) {
	problems := append(checkList(p.ListParams), checkDagID(p.DagID))
	if p.State != nil {
		problems = append(problems, checkEnum("state", *p.State, runStates...))
	}
	if p.BackfillID != nil {
		problems = append(problems, checkPos("backfill_id", *p.BackfillID))
	}
	err := f.call("RunList", false, problems...)
	return []repo.Run{fakeRun(p.DagID, "manual__2024-01-01T00:00:00Z")}, 1, err
}

func (f *fakeStore) RunReport(ctx context.Context, p repo.RunReportParams) (repo.Run, error) {
	problems := []string{checkDagID(p.DagID), checkLen("run_id", p.RunID, 1, 300), checkEnum("state", string(p.State), runStates...)}
	if p.WorkerID != nil {
		problems = append(problems, checkLen("worker_id", *p.WorkerID, 1, 255))
	}
	err := f.call("RunReport", true, problems...)
	r := fakeRun(p.DagID, p.RunID)
	r.State = "success"
	return r, err
}

func (f *fakeStore) RunClaim(ctx context.Context, p repo.RunClaimParams) ([]repo.Run, bool, error) {
	problems := []string{checkLen("worker_id", p.WorkerID, 1, 255), checkRange("limit", p.Limit, 1, 100),
		checkRange("lease_seconds", p.LeaseSeconds, 10, 3600), checkKey(p.IdempotencyKey)}
	if p.DagID != nil {
		problems = append(problems, checkDagID(*p.DagID))
	}
	err := f.call("RunClaim", true, problems...)
	r := fakeRun("d", "manual__2024-01-01T00:00:00Z")
	r.State, r.WorkerID, r.StartDate, r.LeaseExpiresAt = "running", &p.WorkerID, &fakeTime, &fakeTime
	return []repo.Run{r}, false, err
}

func (f *fakeStore) RunHeartbeat(ctx context.Context, runPK int64, workerID string) (repo.Heartbeat, error) {
	err := f.call("RunHeartbeat", true, checkPos("id", runPK), checkLen("worker_id", workerID, 1, 255))
	return repo.Heartbeat{LeaseExpiresAt: fakeTime}, err
}

func (f *fakeStore) checkCreate(p domain.BackfillRequest) []string {
	problems := []string{checkDagID(p.DagID), checkTime("from_date", p.FromDate), checkTime("to_date", p.ToDate),
		checkEnum("reprocess_behavior", string(p.ReprocessBehavior), "none", "failed", "completed"),
		checkRange("max_active_runs", p.MaxActiveRuns, 1, 1000), checkConf("dag_run_conf", p.DagRunConf)}
	if p.FromDate.Location() != time.UTC || p.ToDate.Location() != time.UTC {
		problems = append(problems, "dates not in UTC")
	}
	if p.Description != nil {
		problems = append(problems, checkLen("description", *p.Description, 0, 10000))
	}
	if p.IdempotencyKey != "" && !fakeIdempotencyKey.MatchString(p.IdempotencyKey) {
		problems = append(problems, fmt.Sprintf("Idempotency-Key %q is not 1-255 printable ASCII", p.IdempotencyKey))
	}
	return problems
}

func (f *fakeStore) BackfillCreate(ctx context.Context, p domain.BackfillRequest) (repo.Backfill, bool, error) {
	err := f.call("BackfillCreate", true, f.checkCreate(p)...)
	b := fakeBackfill(1, p.DagID)
	b.CodeRef, b.CreatedBy, b.Reason = p.CodeRef, p.CreatedBy, p.Reason
	return b, false, err
}

func (f *fakeStore) BackfillDryRun(ctx context.Context, p domain.BackfillRequest) (repo.DryRun, error) {
	err := f.call("BackfillDryRun", false, f.checkCreate(p)...)
	slots := []domain.PlannedSlot{{SortOrdinal: 1, LogicalDate: fakeTime, IntervalEnd: fakeTime.Add(time.Hour), Action: "create"}}
	return repo.DryRun{Slots: slots, PlanHash: domain.PlanHash("@daily", "UTC", slots), EstimateBasis: domain.EstimateNoSuccessfulRuns}, err
}

func (f *fakeStore) BackfillPatch(ctx context.Context, p repo.BackfillPatchParams) (repo.Backfill, error) {
	problems := []string{checkPos("backfill_id", p.ID)}
	if p.MaxActiveRuns != nil {
		problems = append(problems, checkRange("max_active_runs", *p.MaxActiveRuns, 1, 1000))
	}
	if p.MaxFailedRuns != nil {
		problems = append(problems, checkRange("max_failed_runs", *p.MaxFailedRuns, 1, 1<<31-1))
	}
	if p.Description != nil {
		problems = append(problems, checkLen("description", *p.Description, 0, 10000))
	}
	err := f.call("BackfillPatch", true, problems...)
	return fakeBackfill(p.ID, "d"), err
}

func (f *fakeStore) BackfillRetry(ctx context.Context, p repo.BackfillRetryParams) (repo.Backfill, bool, error) {
	problems := []string{checkPos("backfill_id", p.ParentID), checkConf("dag_run_conf", p.DagRunConf)}
	if p.MaxActiveRuns != nil {
		problems = append(problems, checkRange("max_active_runs", *p.MaxActiveRuns, 1, 1000))
	}
	if p.MaxFailedRuns != nil {
		problems = append(problems, checkRange("max_failed_runs", *p.MaxFailedRuns, 1, 1<<31-1))
	}
	if p.IdempotencyKey != "" && !fakeIdempotencyKey.MatchString(p.IdempotencyKey) {
		problems = append(problems, fmt.Sprintf("Idempotency-Key %q is not 1-255 printable ASCII", p.IdempotencyKey))
	}
	err := f.call("BackfillRetry", true, problems...)
	return fakeBackfill(2, "d"), false, err
}

func (f *fakeStore) RunRelease(ctx context.Context, runPK int64, workerID string) (repo.Run, error) {
	err := f.call("RunRelease", true, checkPos("id", runPK), checkLen("worker_id", workerID, 1, 255))
	return fakeRun("d", "manual__2024-01-01T00:00:00Z"), err
}

func (f *fakeStore) DagDelete(ctx context.Context, dagID string) error {
	return f.call("DagDelete", true, checkDagID(dagID))
}

func (f *fakeStore) BackfillGet(ctx context.Context, id int64) (repo.Backfill, error) {
	err := f.call("BackfillGet", false, checkPos("backfill_id", id))
	return fakeBackfill(id, "d"), err
}

func (f *fakeStore) BackfillGetWithETA(ctx context.Context, id int64) (repo.Backfill, *float64, error) {
	err := f.call("BackfillGetWithETA", false, checkPos("backfill_id", id))
	return fakeBackfill(id, "d"), nil, err
}

func (f *fakeStore) BackfillList(ctx context.Context, p repo.BackfillListParams) ([]repo.Backfill, int, error) {
	problems := checkList(p.ListParams)
	if p.DagID != nil {
		problems = append(problems, checkDagID(*p.DagID))
	}
	if p.State != nil {
		problems = append(problems, checkEnum("state", *p.State, backfillStates...))
	}
	err := f.call("BackfillList", false, problems...)
	return []repo.Backfill{fakeBackfill(1, "d")}, 1, err
}

func (f *fakeStore) BackfillSlots(ctx context.Context, p repo.BackfillSlotsParams) ([]repo.BackfillSlot, int64, error) {
	err := f.call("BackfillSlots", false, append(checkList(p.ListParams), checkPos("backfill_id", p.BackfillID))...)
	reason := "already exists"
	return []repo.BackfillSlot{{SortOrdinal: 1, LogicalDate: fakeTime, ExceptionReason: &reason}}, 1, err
}

func (f *fakeStore) BackfillPause(ctx context.Context, id int64) (repo.Backfill, error) {
	err := f.call("BackfillPause", true, checkPos("backfill_id", id))
	b := fakeBackfill(id, "d")
	b.State = "paused"
	return b, err
}

func (f *fakeStore) BackfillUnpause(ctx context.Context, id int64) (repo.Backfill, error) {
	err := f.call("BackfillUnpause", true, checkPos("backfill_id", id))
	return fakeBackfill(id, "d"), err
}

func (f *fakeStore) BackfillCancel(ctx context.Context, id int64) (repo.Backfill, error) {
	err := f.call("BackfillCancel", true, checkPos("backfill_id", id))
	b := fakeBackfill(id, "d")
	b.State = "canceling"
	return b, err
}

func (f *fakeStore) TerminalEventStored(ctx context.Context, backfillID, after int64) (bool, error) {
	return false, f.call("TerminalEventStored", false, checkPos("backfill_id", backfillID))
}

func (f *fakeStore) EventScan(ctx context.Context, p repo.EventScanParams) (repo.EventScanPage, error) {
	problems := []string{checkRange("limit", p.Limit, 1, 1000)}
	if p.After < 0 {
		problems = append(problems, fmt.Sprintf("after %d is negative", p.After))
	}
	if p.BackfillID != nil {
		problems = append(problems, checkPos("backfill_id", *p.BackfillID))
	}
	err := f.call("EventScan", false, problems...)
	return repo.EventScanPage{Next: p.After, End: true}, err
}

func (f *fakeStore) BackfillProgressMany(ctx context.Context, ids []int64) ([]repo.Backfill, time.Time, error) {
	var problems []string
	for _, id := range ids {
		problems = append(problems, checkPos("backfill_id", id))
	}
	err := f.call("BackfillProgressMany", false, problems...)
	out := make([]repo.Backfill, len(ids))
	for i, id := range ids {
		out[i] = fakeBackfill(id, "d")
	}
	return out, fakeTime, err
}

// fuzzToken is the one token of the fuzzed handler that requires one.
const fuzzToken = "fuzz-token"

// fuzzHandlers are built once: loading and validating the spec is the slow part.
var fuzzHandlers = sync.OnceValues(func() (*fakeStore, [2]http.Handler) {
	store := &fakeStore{}
	var hs [2]http.Handler
	for i, tokens := range [][]string{nil, {fuzzToken}} {
		h, err := handlers.New(handlers.Options{Store: store, APITokens: tokens,
			Ready: func(context.Context) error { return nil }})
		if err != nil {
			panic(err)
		}
		hs[i] = h
	}
	return store, hs
})

// storeErrors are the domain errors a fuzzed store may answer with (mode>>2, 0 = success): each
// maps to a 4xx, so an answer is never a 5xx whatever the store says.
var storeErrors = []error{
	nil,
	repo.ErrDagNotFound, repo.ErrBackfillNotFound, repo.ErrRunNotFound,
	&repo.BackfillAlreadyRunningError{ActiveBackfillID: 7}, repo.ErrRunAlreadyExists, repo.ErrBackfillNotActive,
	repo.ErrInvalidTransition, repo.ErrLeaseLost, domain.ErrInvalidDag, domain.ErrInvalidBackfill,
	repo.ErrNoRunsToCreate, domain.ErrTooManyRuns, repo.ErrIdempotencyKeyReused,
	&domain.PlanChangedError{CurrentPlanHash: "abc"}, repo.ErrBackfillNotTerminal, repo.ErrRunsInFlight,
	&domain.InvalidLogicalDatesError{Dates: []time.Time{time.Unix(0, 0)}, Count: 1},
}

// validHeaderValue mirrors what net/http's server accepts in a header value.
func validHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < 0x20 && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

// checkOneRequest sends one fuzzed request to the real handler and checks the properties that
// hold for every input. mode: bit 0 selects the handler that requires a token, bit 1 sends
// the body chunked (no Content-Length), the rest picks the store's answer.
func checkOneRequest(t *testing.T, method, path, contentType, idempotencyKey, authorization string, body []byte, mode uint8) {
	store, hs := fuzzHandlers()
	if !strings.HasPrefix(path, "/") {
		path = "/" + path
	}
	if !validHeaderValue(contentType) || !validHeaderValue(idempotencyKey) || !validHeaderValue(authorization) {
		return // net/http refuses such requests before any handler runs
	}
	req, err := http.NewRequest(method, "http://backfill.test"+path, bytes.NewReader(body))
	if err != nil {
		return // not a request a client can send
	}
	method = req.Method // "" is GET, as net/http sends it
	if mode&2 != 0 && len(body) > 0 {
		req.Body = io.NopCloser(bytes.NewReader(body))
		req.ContentLength = -1
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if idempotencyKey != "" {
		req.Header.Set("Idempotency-Key", idempotencyKey)
	}
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	withToken := mode&1 != 0
	storeErr := storeErrors[int(mode>>2)%len(storeErrors)]
	store.reset(storeErr)

	rec := httptest.NewRecorder()
	hs[mode&1].ServeHTTP(rec, req)
	res := rec.Result()
	calls, writes, violations := store.snapshot()
	desc := fmt.Sprintf("%s %q (content-type %q, key %q, auth %q, mode %d, body %q) answered %d",
		method, path, contentType, idempotencyKey, authorization, mode, truncate(body), res.StatusCode)

	if res.StatusCode >= 500 {
		t.Fatalf("%s: a 5xx: %s", desc, rec.Body.String())
	}
	if len(violations) > 0 {
		t.Fatalf("%s: the store was called with values the contract forbids: %v", desc, violations)
	}
	if res.StatusCode >= 400 && len(writes) > 0 {
		t.Fatalf("%s: a %d after a write call succeeded: %v", desc, res.StatusCode, writes)
	}
	if withToken && authorization != "Bearer "+fuzzToken && len(calls) > 0 {
		t.Fatalf("%s: without the token the store was called: %v", desc, calls)
	}
	ct := res.Header.Get("Content-Type")
	apiPath := strings.HasPrefix(req.URL.Path, "/api/")
	switch {
	case ct == "application/problem+json":
		if res.StatusCode < 400 {
			t.Fatalf("%s: a problem with a success status", desc)
		}
		var p struct {
			Status int    `json:"status"`
			Code   string `json:"code"`
			Title  string `json:"title"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
			t.Fatalf("%s: problem+json that is not JSON: %v: %q", desc, err, rec.Body.String())
		}
		if p.Status != res.StatusCode || p.Code == "" || p.Title == "" {
			t.Fatalf("%s: incomplete problem %s", desc, rec.Body.String())
		}
	case ct == "application/json":
		if res.StatusCode >= 400 {
			t.Fatalf("%s: an error that is not problem+json", desc)
		}
		if method != http.MethodHead && !json.Valid(rec.Body.Bytes()) {
			t.Fatalf("%s: application/json that is not JSON: %q", desc, rec.Body.String())
		}
	case res.StatusCode == http.StatusNoContent && rec.Body.Len() == 0:
		// DELETE answers no content.
	case res.StatusCode >= 300 && res.StatusCode < 400 && !apiPath && res.Header.Get("Location") != "":
		// "/" and "/docs/" redirect a person's browser to the console and the reference page;
		// net/http writes the small HTML body a browser shows if it does not follow.
	case res.StatusCode < 300 && !apiPath && (method == http.MethodGet || method == http.MethodHead):
		// The operations and documentation routes (/openapi.yaml, /docs, ...) serve other
		// media types.
	default:
		t.Fatalf("%s: Content-Type %q is neither JSON nor problem+json: %q", desc, ct, rec.Body.String())
	}
}

func truncate(b []byte) string {
	if len(b) > 200 {
		return string(b[:200]) + "..."
	}
	return string(b)
}

// fuzzSeed is one seed request.
type fuzzSeed struct {
	method, path, contentType, key, auth, body string
	mode                                       uint8
}

// fuzzSeeds are valid and invalid requests for every route.
func fuzzSeeds() []fuzzSeed {
	const j = "application/json"
	bf := `{"dag_id":"sales","from_date":"2024-01-01T00:00:00Z","to_date":"2024-01-31T00:00:00Z","run_backwards":true,"dag_run_conf":{"a":1},"reprocess_behavior":"failed","max_active_runs":4,"description":"x"}`
	seeds := []fuzzSeed{
		// DAGs.
		{"PUT", "/api/v1/dags/sales", j, "", "", `{"schedule":"0 2 * * *","timezone":"America/New_York","max_active_runs":3,"is_paused":false,"description":"d"}`, 0},
		{"PUT", "/api/v1/dags/sales", j, "", "", `{"schedule":"@daily"}`, 4},
		{"PUT", "/api/v1/dags/bad%20id", j, "", "", `{"schedule":"@daily"}`, 0},
		{"PUT", "/api/v1/dags/sales", j, "", "", `{"schedule":"@daily","max_active_runs":0}`, 0},
		{"PUT", "/api/v1/dags/sales", "text/plain", "", "", `{"schedule":"@daily"}`, 0},
		{"GET", "/api/v1/dags/sales", "", "", "", "", 0},
		{"GET", "/api/v1/dags?limit=10&offset=5", "", "", "", "", 0},
		{"GET", "/api/v1/dags?limit=0", "", "", "", "", 0},
		// Manual runs.
		{"POST", "/api/v1/dags/sales/runs", j, "", "", `{"logical_date":"2024-01-05T00:00:00Z","conf":{"k":[1,2]}}`, 0},
		{"POST", "/api/v1/dags/sales/runs", j, "", "", `{"logical_date":"2024-02-30T00:00:00Z"}`, 0},
		{"GET", "/api/v1/dags/sales/runs?state=failed&backfill_id=3&limit=1000", "", "", "", "", 0},
		{"GET", "/api/v1/dags/sales/runs/backfill__2024-01-01T00:00:00Z", "", "", "", "", 8},
		{"PATCH", "/api/v1/dags/sales/runs/manual__2024-01-01T00:00:00Z", j, "", "", `{"state":"success","worker_id":"w1"}`, 0},
		{"PATCH", "/api/v1/dags/sales/runs/manual__2024-01-01T00:00:00Z", j, "", "", `{"state":"running"}`, 28},
		{"PATCH", "/api/v1/dags/sales/runs/x", j, "", "", `[{"state":"success"}]`, 0},
		// Backfills.
		{"POST", "/api/v1/backfills", j, "key-1", "", bf, 0},
		{"POST", "/api/v1/backfills", j, "", "", `{"dag_id":"sales","from_date":"2024-01-01T00:00:00Z","to_date":"2024-01-02T00:00:00Z"}`, 2},
		{"POST", "/api/v1/backfills", j, "", "", `{"dag_id":"sales","from_date":"2024-01-01T00:00:00Z","to_date":"2024-01-02T00:00:00Z"}`, 16},
		{"POST", "/api/v1/backfills", j, "", "", `{"dag_id":"sales","from_date":"2024-01-01","to_date":"2024-01-02T00:00:00Z"}`, 0},
		{"POST", "/api/v1/backfills", j, "", "", `{"dag_id":"sales","from_date":"2024-01-01T00:00:00Z","to_date":"2024-01-02T00:00:00Z","foo":1}`, 0},
		{"POST", "/api/v1/backfills", j, "", "", `{"dag_id":"sales","from_date":"2024-01-01T00:00:00Z",`, 0},
		{"POST", "/api/v1/backfills", j, "ключ", "", bf, 0},
		{"POST", "/api/v1/backfills", j, "", "", `{"dag_id":"sales","from_date":"2024-01-01T00:00:00+14:00","to_date":"2024-01-02T00:00:00-12:00","dag_run_conf":null}`, 0},
		{"POST", "/api/v1/backfills", j, "", "", "{\"dag_id\":\"s\xffales\",\"from_date\":\"2024-01-01T00:00:00Z\",\"to_date\":\"2024-01-02T00:00:00Z\"}", 0},
		{"POST", "/api/v1/backfills/dry_run", j, "", "", bf, 0},
		{"POST", "/api/v1/backfills/dry_run", j, "", "", `{"dag_id":"sales","from_date":"2024-01-01T00:00:00Z","to_date":"2024-01-02T00:00:00Z","max_active_runs":1e3}`, 0},
		{"GET", "/api/v1/backfills?dag_id=sales&state=running&active=true&order_by=-id&limit=5&offset=1", "", "", "", "", 0},
		{"GET", "/api/v1/backfills?active=maybe", "", "", "", "", 0},
		{"GET", "/api/v1/backfills/1", "", "", "", "", 0},
		{"GET", "/api/v1/backfills/9223372036854775808", "", "", "", "", 0},
		{"GET", "/api/v1/backfills/1/dag_runs?order_by=-sort_ordinal&limit=2", "", "", "", "", 0},
		{"PUT", "/api/v1/backfills/1/pause", "", "", "", "", 0},
		{"PUT", "/api/v1/backfills/1/unpause", "", "", "", "", 24},
		{"PUT", "/api/v1/backfills/0/cancel", "", "", "", "", 0},
		{"PUT", "/api/v1/backfills/1/cancel", j, "", "", `{"x":1}`, 0},
		// Operator control: PATCH, retry, release, DAG delete, notes.
		{"PATCH", "/api/v1/backfills/1", j, "", "", `{"max_active_runs":3,"max_failed_runs":null,"description":null}`, 0},
		{"PATCH", "/api/v1/backfills/1", "application/merge-patch+json", "", "", `{"max_failed_runs":0}`, 0},
		{"PATCH", "/api/v1/backfills/1", j, "", "", `{"max_active_runs":null}`, 0},
		{"PATCH", "/api/v1/backfills/1", j, "", "", `{"state":"paused"}`, 0},
		{"POST", "/api/v1/backfills/1/retry", "", "key-2", "", "", 0},
		{"POST", "/api/v1/backfills/1/retry", j, "", "", `{"max_active_runs":2,"dag_run_conf":{"n":9007199254740993},"max_failed_runs":1}`, 0},
		{"POST", "/api/v1/backfills/1/retry", j, "", "", `{"reprocess_behavior":"none"}`, 0},
		{"POST", "/api/v1/runs/7/release", j, "", "", `{"worker_id":"w1"}`, 0},
		{"POST", "/api/v1/runs/7/release", j, "", "", `{}`, 0},
		{"POST", "/api/v1/backfills", j, "", "", `{"dag_id":"sales","from_date":"2024-01-01T00:00:00Z","to_date":"2024-01-02T00:00:00Z","max_failed_runs":2}`, 56},
		{"POST", "/api/v1/backfills/3/retry", j, "", "", `{}`, 60},
		{"DELETE", "/api/v1/dags/sales", "", "", "", "", 64},
		{"PATCH", "/api/v1/dags/sales/runs/manual__2024-01-01T00:00:00Z", j, "", "", `{"state":"failed","worker_id":"w1","note":"disk full"}`, 0},
		// Executors.
		{"POST", "/api/v1/runs/claim", j, "", "", `{"worker_id":"w1","limit":5,"lease_seconds":60,"dag_id":"sales"}`, 0},
		{"POST", "/api/v1/runs/claim", j, "", "", `{"worker_id":"w1","limit":101}`, 0},
		{"POST", "/api/v1/runs/claim", j, "", "", `{"worker_id":"w1","lease_seconds":9.5}`, 0},
		{"POST", "/api/v1/runs/7/heartbeat", j, "", "", `{"worker_id":"w1"}`, 32},
		{"POST", "/api/v1/runs/-7/heartbeat", j, "", "", `{"worker_id":"w1"}`, 0},
		// Tokens.
		{"GET", "/api/v1/backfills", "", "", "Bearer " + fuzzToken, "", 1},
		{"POST", "/api/v1/backfills", j, "", "Bearer fuzz-toke", bf, 1},
		{"POST", "/api/v1/runs/claim", j, "", "Basic " + fuzzToken, `{"worker_id":"w"}`, 1},
		{"GET", "/%61pi/v1/dags", "", "", "", "", 1},
		// Operations and unknown routes.
		{"GET", "/healthz", "", "", "", "", 1},
		{"GET", "/readyz", "", "", "", "", 0},
		{"GET", "/openapi.yaml", "", "", "", "", 0},
		{"GET", "/metrics", "", "", "", "", 0},
		{"DELETE", "/api/v1/dags/sales", "", "", "", "", 0},
		{"HEAD", "/api/v1/backfills", "", "", "", "", 0},
		{"OPTIONS", "/api/v1/backfills", "", "", "", "", 0},
		{"GET", "/api/v1/nowhere", "", "", "", "", 0},
		{"POST", "/api/v1/backfills", "application/json; charset=utf-8", "", "", `{"dag_id":"sales","from_date":"2024-01-01T00:00:00Z","to_date":"2024-01-02T00:00:00Z"}`, 0},
		{"POST", "/api/v1/backfills", "application/merge-patch+json", "", "", `{}`, 0},
	}
	return seeds
}

// FuzzRequestDecoding sends fuzzed method, path, headers and body through the real handler (spec
// validation, decoding, handlers) over a fake store: never a 5xx or a panic, always JSON or
// problem+json, no successful write behind a 4xx, nothing reaches the store without a valid
// token or with values outside the contract.
//
//	go test -run '^$' -fuzz '^FuzzRequestDecoding$' -fuzztime 30s ./handlers/
func FuzzRequestDecoding(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add(s.method, s.path, s.contentType, s.key, s.auth, []byte(s.body), s.mode)
	}
	f.Fuzz(checkOneRequest)
}

func (f *fakeStore) PoolPut(ctx context.Context, p repo.PoolPutParams) (repo.Pool, bool, error) {
	err := f.call("PoolPut", true, checkDagID(p.Name), checkRange("slots", p.Slots, 1, 100000))
	return repo.Pool{Name: p.Name, Slots: p.Slots, CreatedAt: fakeTime, UpdatedAt: fakeTime}, true, err
}

func (f *fakeStore) PoolGet(ctx context.Context, name string) (repo.Pool, error) {
	err := f.call("PoolGet", false, checkDagID(name))
	return repo.Pool{Name: name, Slots: 1, CreatedAt: fakeTime, UpdatedAt: fakeTime}, err
}

func (f *fakeStore) PoolList(ctx context.Context, p repo.ListParams) ([]repo.Pool, int, error) {
	return nil, 0, f.call("PoolList", false)
}

func (f *fakeStore) PoolDelete(ctx context.Context, name string) error {
	return f.call("PoolDelete", true, checkDagID(name))
}
