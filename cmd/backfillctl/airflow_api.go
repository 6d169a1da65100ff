package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// airflowAPI calls the operations of Airflow 3's stable REST API (/api/v2) that the bridge
// and `dags import` use, with the names and types of Airflow's OpenAPI description.
type airflowAPI struct {
	base string // e.g. https://airflow.example.com, without /api/v2
	http *http.Client
	auth *airflowAuth
}

func newAirflowAPI(base, token, user, password string) *airflowAPI {
	base = strings.TrimRight(base, "/")
	hc := &http.Client{Timeout: 30 * time.Second}
	return &airflowAPI{base: base, http: hc, auth: &airflowAuth{
		base: base, user: user, password: password, token: token, http: hc, now: time.Now,
	}}
}

// airflowError is an answer other than 2xx: its status and the detail of its body
// (HTTPExceptionResponse's string or object, or HTTPValidationError's messages).
type airflowError struct {
	Status int
	Detail string
}

func (e *airflowError) Error() string {
	return fmt.Sprintf("airflow answered %d %s: %s", e.Status, http.StatusText(e.Status), e.Detail)
}

// airflowStatus answers err's HTTP status, 0 when it is not an answer of Airflow's.
func airflowStatus(err error) int {
	var ae *airflowError
	if errors.As(err, &ae) {
		return ae.Status
	}
	return 0
}

// airflowTemporary reports whether sending the same request again may succeed: a network
// error, a 5xx, a 429, or a 401 that a renewed login did not mend yet (an API server
// restarting with a new key, a login answered by another one). None of these is the run's
// fault, so none fails it: the lease holds while the bridge tries again.
func airflowTemporary(err error) bool {
	switch s := airflowStatus(err); {
	case s == 0:
		return !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
	case s >= 500, s == http.StatusTooManyRequests, s == http.StatusUnauthorized:
		return true
	}
	return false
}

func readAirflowError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var body struct {
		Detail json.RawMessage `json:"detail"`
	}
	detail := strings.TrimSpace(string(b))
	if json.Unmarshal(b, &body) == nil && len(body.Detail) > 0 {
		var s string
		var list []struct {
			Loc []any  `json:"loc"`
			Msg string `json:"msg"`
		}
		switch {
		case json.Unmarshal(body.Detail, &s) == nil:
			detail = s
		case json.Unmarshal(body.Detail, &list) == nil && len(list) > 0:
			var parts []string
			for _, v := range list {
				parts = append(parts, fmt.Sprintf("%v: %s", v.Loc, v.Msg))
			}
			detail = strings.Join(parts, "; ")
		default:
			detail = string(body.Detail)
		}
	}
	return &airflowError{Status: resp.StatusCode, Detail: detail}
}

// do sends one request with the bearer token and decodes a 2xx answer into out. A 401 is
// answered by logging in again and sending the request once more.
func (a *airflowAPI) do(ctx context.Context, method, path string, query url.Values, body, out any) error {
	var payload []byte
	if body != nil {
		var err error
		if payload, err = json.Marshal(body); err != nil {
			return err
		}
	}
	u := a.base + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	for try := 0; ; try++ {
		token, err := a.auth.bearer(ctx)
		if err != nil {
			return err
		}
		req, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(payload))
		if err != nil {
			return err
		}
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		req.Header.Set("Accept", "application/json")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := a.http.Do(req)
		if err != nil {
			return err
		}
		if resp.StatusCode == http.StatusUnauthorized && try == 0 && a.auth.rejected(token) {
			resp.Body.Close()
			continue
		}
		defer resp.Body.Close()
		if resp.StatusCode < 200 || resp.StatusCode > 299 {
			return readAirflowError(resp)
		}
		if out == nil {
			return nil
		}
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			return fmt.Errorf("airflow %s %s: decoding the answer: %w", method, path, err)
		}
		return nil
	}
}

// afTrigger is TriggerDAGRunPostBody. The schema forbids fields it does not name
// (additionalProperties: false): add none here that it lacks.
type afTrigger struct {
	DagRunID          string          `json:"dag_run_id"`
	LogicalDate       time.Time       `json:"logical_date"`
	DataIntervalStart time.Time       `json:"data_interval_start"`
	DataIntervalEnd   time.Time       `json:"data_interval_end"`
	Conf              json.RawMessage `json:"conf"`
	Note              string          `json:"note,omitempty"`
}

// afDagRun is the part of DAGRunResponse the bridge reads.
type afDagRun struct {
	DagRunID string `json:"dag_run_id"`
	DagID    string `json:"dag_id"`
	State    string `json:"state"` // DagRunState: queued, running, success, failed
}

func runPath(dagID, dagRunID string) string {
	return "/api/v2/dags/" + url.PathEscape(dagID) + "/dagRuns/" + url.PathEscape(dagRunID)
}

// trigger is POST /api/v2/dags/{dag_id}/dagRuns; a dag_run_id that exists answers 409.
func (a *airflowAPI) trigger(ctx context.Context, dagID string, body afTrigger) (afDagRun, error) {
	var out afDagRun
	err := a.do(ctx, http.MethodPost, "/api/v2/dags/"+url.PathEscape(dagID)+"/dagRuns", nil, body, &out)
	return out, err
}

// getRun is GET /api/v2/dags/{dag_id}/dagRuns/{dag_run_id}.
func (a *airflowAPI) getRun(ctx context.Context, dagID, dagRunID string) (afDagRun, error) {
	var out afDagRun
	err := a.do(ctx, http.MethodGet, runPath(dagID, dagRunID), nil, nil, &out)
	return out, err
}

// failRun is PATCH /api/v2/dags/{dag_id}/dagRuns/{dag_run_id} with DAGRunPatchBody
// {"state": "failed", "note": ...}: Airflow stops scheduling the run's tasks.
func (a *airflowAPI) failRun(ctx context.Context, dagID, dagRunID, note string) error {
	body := struct {
		State string `json:"state"`
		Note  string `json:"note"`
	}{State: "failed", Note: note}
	return a.do(ctx, http.MethodPatch, runPath(dagID, dagRunID), nil, body, nil)
}

// failedTasks is GET .../dagRuns/{dag_run_id}/taskInstances?state=failed: the task ids
// (with the map index of a mapped task) of the run's failed task instances.
func (a *airflowAPI) failedTasks(ctx context.Context, dagID, dagRunID string) ([]string, error) {
	var out struct {
		TaskInstances []struct {
			TaskID   string `json:"task_id"`
			MapIndex int    `json:"map_index"`
		} `json:"task_instances"`
	}
	q := url.Values{"state": {"failed"}, "limit": {"100"}}
	if err := a.do(ctx, http.MethodGet, runPath(dagID, dagRunID)+"/taskInstances", q, nil, &out); err != nil {
		return nil, err
	}
	var ids []string
	for _, ti := range out.TaskInstances {
		id := ti.TaskID
		if ti.MapIndex >= 0 {
			id = fmt.Sprintf("%s[%d]", id, ti.MapIndex)
		}
		ids = append(ids, id)
	}
	return ids, nil
}
