// Package airflowfake is a test kit: an in-process Apache Airflow 3 API server (httptest)
// holding itself to Airflow's published v2 OpenAPI description
// (apache/airflow, airflow-core/src/airflow/api_fastapi/core_api/openapi/v2-rest-api-generated.yaml)
// for the operations the backfill service's Airflow bridge uses. Only tests import it.
//
// What it enforces, as Airflow's FastAPI server does: request bodies decoded strictly
// (TriggerDAGRunPostBody and DAGRunPatchBody forbid extra fields: 422 extra_forbidden), field
// types (422), the 409 of a duplicate dag_run_id, 401 without a valid bearer token, 403 for a
// DAG the caller may not touch, 404 for what does not exist; error bodies are
// HTTPExceptionResponse ({"detail": "..."}) or HTTPValidationError ({"detail": [...]}).
// Every 422 extra_forbidden fails the test that made the fake.
package airflowfake

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// Outcome scripts one Airflow DAG run: it is queued until its first poll, running after,
// and ends at the poll numbered Polls (1-based), unless Hold keeps it running until Release.
type Outcome struct {
	Polls       int      // the GET of the run at which it ends (at least 2: queued, then running)
	FailedTasks []string // when set, the run ends failed with these task instances failed
	Hold        bool     // stays running until Fake.Release
}

// DAG is one of the fake's DAGs, as GET /api/v2/dags and /details answer it.
type DAG struct {
	DagID            string
	TimetableSummary *string // e.g. "0 2 * * *", "@daily", nil for no schedule
	Timezone         string
	MaxActiveRuns    int
	IsPaused         bool
	Forbidden        bool // the API user may not touch it: 403
}

// Run is the fake's record of one DAG run.
type Run struct {
	DagID, DagRunID   string
	LogicalDate       *time.Time
	DataIntervalStart *time.Time
	DataIntervalEnd   *time.Time
	Conf              json.RawMessage
	Note              *string
	State             string // queued|running|success|failed
	QueuedAt          time.Time
	Polls             int
	Patches           []string // states PATCHed, in order
	outcome           Outcome
}

// Fake is the server. Create it with New; it is closed when the test ends.
type Fake struct {
	URL string

	t   testing.TB
	srv *httptest.Server

	mu        sync.Mutex
	tokens    map[string]bool      // static bearer tokens accepted
	users     map[string]string    // user -> password, for POST /auth/token
	ttl       time.Duration        // lifetime of a token from /auth/token
	issued    map[string]time.Time // token from /auth/token -> its expiry
	logins    int
	rejected  int // requests answered 401
	dags      map[string]DAG
	dagOrder  []string
	runs      map[string]*Run // by dag_id + "/" + dag_run_id
	triggers  map[string]int  // successful triggers by dag_id + "/" + dag_run_id
	conflicts map[string]int  // 409s by dag_id + "/" + dag_run_id
	script    func(dagID string, logicalDate time.Time) Outcome
	released  bool
}

// New starts a fake that accepts the bearer token token (none when empty).
func New(t testing.TB, token string) *Fake {
	f := &Fake{
		t: t, tokens: map[string]bool{}, users: map[string]string{}, ttl: time.Hour,
		issued: map[string]time.Time{}, dags: map[string]DAG{}, runs: map[string]*Run{},
		triggers: map[string]int{}, conflicts: map[string]int{},
		script: func(string, time.Time) Outcome { return Outcome{Polls: 2} },
	}
	if token != "" {
		f.tokens[token] = true
	}
	f.srv = httptest.NewServer(f.routes())
	f.URL = f.srv.URL
	t.Cleanup(f.srv.Close)
	return f
}

// AddUser lets user log in at POST /auth/token; its tokens last ttl.
func (f *Fake) AddUser(user, password string, ttl time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.users[user] = password
	f.ttl = ttl
}

// AddDAG adds or replaces a DAG.
func (f *Fake) AddDAG(d DAG) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.dags[d.DagID]; !ok {
		f.dagOrder = append(f.dagOrder, d.DagID)
	}
	f.dags[d.DagID] = d
}

// Script sets how each new run ends, by its DAG and logical date.
func (f *Fake) Script(fn func(dagID string, logicalDate time.Time) Outcome) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.script = fn
}

// Release lets every held run finish: it ends at its next poll.
func (f *Fake) Release() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.released = true
}

// Triggers answers how many times each run was created (dag_id/dag_run_id -> count).
func (f *Fake) Triggers() map[string]int { return f.copyCounts(f.triggers) }

// Conflicts answers how many 409s each dag_id/dag_run_id got.
func (f *Fake) Conflicts() map[string]int { return f.copyCounts(f.conflicts) }

func (f *Fake) copyCounts(m map[string]int) map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]int, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// Runs answers a copy of every run, by dag_id/dag_run_id.
func (f *Fake) Runs() map[string]Run {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]Run, len(f.runs))
	for k, r := range f.runs {
		c := *r
		c.Patches = append([]string(nil), r.Patches...)
		out[k] = c
	}
	return out
}

// Logins answers how many tokens POST /auth/token issued.
func (f *Fake) Logins() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.logins
}

// Rejected answers how many requests were answered 401.
func (f *Fake) Rejected() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rejected
}

func (f *Fake) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /auth/token", f.login)
	mux.HandleFunc("GET /api/v2/dags", f.authed(f.listDAGs))
	mux.HandleFunc("GET /api/v2/dags/{dag_id}/details", f.authed(f.dagDetails))
	mux.HandleFunc("POST /api/v2/dags/{dag_id}/dagRuns", f.authed(f.trigger))
	mux.HandleFunc("GET /api/v2/dags/{dag_id}/dagRuns/{dag_run_id}", f.authed(f.getRun))
	mux.HandleFunc("PATCH /api/v2/dags/{dag_id}/dagRuns/{dag_run_id}", f.authed(f.patchRun))
	mux.HandleFunc("GET /api/v2/dags/{dag_id}/dagRuns/{dag_run_id}/taskInstances", f.authed(f.taskInstances))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		f.t.Errorf("airflowfake: %s %s is not an operation the bridge should use", r.Method, r.URL.Path)
		detail(w, http.StatusNotFound, "Not Found")
	})
	return mux
}

// detail answers an HTTPExceptionResponse.
func detail(w http.ResponseWriter, status int, msg string) {
	answer(w, status, map[string]any{"detail": msg})
}

func answer(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
