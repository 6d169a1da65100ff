package airflowfake

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"time"
)

// runIDPattern is Airflow's default [scheduler] allowed_run_id_pattern: a dag_run_id
// outside it is refused with 400.
var runIDPattern = regexp.MustCompile(`^[A-Za-z0-9_.~:+-]+$`)

// dag finds the path's DAG, answering 404 or 403 (and false) as Airflow does.
func (f *Fake) dag(w http.ResponseWriter, r *http.Request) (DAG, bool) {
	id := r.PathValue("dag_id")
	d, ok := f.dags[id]
	switch {
	case !ok:
		detail(w, http.StatusNotFound, fmt.Sprintf("The Dag with ID: `%s` was not found", id))
		return d, false
	case d.Forbidden:
		detail(w, http.StatusForbidden, "Forbidden")
		return d, false
	}
	return d, true
}

// run finds the path's DAG run, answering 404 (and nil) when there is none.
func (f *Fake) run(w http.ResponseWriter, r *http.Request) *Run {
	dagID, runID := r.PathValue("dag_id"), r.PathValue("dag_run_id")
	run := f.runs[dagID+"/"+runID]
	if run == nil {
		detail(w, http.StatusNotFound, fmt.Sprintf("The DagRun with dag_id: `%s` and run_id: `%s` was not found", dagID, runID))
	}
	return run
}

// trigger is POST /api/v2/dags/{dag_id}/dagRuns (trigger_dag_run): body
// TriggerDAGRunPostBody, answer DAGRunResponse; 409 for a dag_run_id that exists.
func (f *Fake) trigger(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	d, ok := f.dag(w, r)
	if !ok {
		return
	}
	body, ok := f.decode(w, r, triggerBody)
	if !ok {
		return
	}
	logical := timeField(body, "logical_date")
	var runID string
	if raw, ok := body["dag_run_id"]; ok {
		_ = json.Unmarshal(raw, &runID)
	}
	if runID == "" {
		runID = "manual__" + time.Now().UTC().Format(time.RFC3339Nano)
	}
	if !runIDPattern.MatchString(runID) {
		detail(w, http.StatusBadRequest, fmt.Sprintf("The run_id provided '%s' does not match regex pattern '%s'", runID, runIDPattern))
		return
	}
	key := d.DagID + "/" + runID
	if _, dup := f.runs[key]; dup {
		f.conflicts[key]++
		detail(w, http.StatusConflict, fmt.Sprintf("DAG Run with run_id: `%s` already exists for dag: `%s`", runID, d.DagID))
		return
	}
	run := &Run{
		DagID: d.DagID, DagRunID: runID, LogicalDate: logical,
		DataIntervalStart: timeField(body, "data_interval_start"), DataIntervalEnd: timeField(body, "data_interval_end"),
		Conf: body["conf"], State: "queued", QueuedAt: time.Now().UTC(),
	}
	if raw, ok := body["note"]; ok {
		_ = json.Unmarshal(raw, &run.Note)
	}
	when := time.Time{}
	if logical != nil {
		when = *logical
	}
	run.outcome = f.script(d.DagID, when)
	f.runs[key] = run
	f.triggers[key]++
	answer(w, http.StatusOK, runResponse(run))
}

// getRun is GET /api/v2/dags/{dag_id}/dagRuns/{dag_run_id} (get_dag_run). Each GET is a
// poll: the run moves along its scripted outcome (a paused DAG's run stays queued).
func (f *Fake) getRun(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	d, ok := f.dag(w, r)
	if !ok {
		return
	}
	run := f.run(w, r)
	if run == nil {
		return
	}
	run.Polls++
	o := run.outcome
	switch {
	case run.State == "queued" && !d.IsPaused:
		run.State = "running"
	case run.State == "running" && (o.Hold && f.released || !o.Hold && run.Polls >= o.Polls):
		run.State = "success"
		if len(o.FailedTasks) > 0 {
			run.State = "failed"
		}
	}
	answer(w, http.StatusOK, runResponse(run))
}

// patchRun is PATCH /api/v2/dags/{dag_id}/dagRuns/{dag_run_id} (patch_dag_run): body
// DAGRunPatchBody.
func (f *Fake) patchRun(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.dag(w, r); !ok {
		return
	}
	run := f.run(w, r)
	if run == nil {
		return
	}
	body, ok := f.decode(w, r, patchBody)
	if !ok {
		return
	}
	var state *string
	_ = json.Unmarshal(body["state"], &state)
	if state != nil {
		run.State = *state
		run.Patches = append(run.Patches, *state)
	}
	if raw, ok := body["note"]; ok {
		_ = json.Unmarshal(raw, &run.Note)
	}
	answer(w, http.StatusOK, runResponse(run))
}

// taskInstances is GET .../dagRuns/{dag_run_id}/taskInstances (get_task_instances),
// filtered by the repeated query parameter state; answer TaskInstanceCollectionResponse.
func (f *Fake) taskInstances(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.dag(w, r); !ok {
		return
	}
	run := f.run(w, r)
	if run == nil {
		return
	}
	tis := []map[string]any{taskInstance(run, "extract", "success")}
	for _, task := range run.outcome.FailedTasks {
		state := "running"
		if run.State == "failed" {
			state = "failed"
		}
		tis = append(tis, taskInstance(run, task, state))
	}
	want := r.URL.Query()["state"]
	out := []map[string]any{}
	for _, ti := range tis {
		if len(want) == 0 || slices.Contains(want, ti["state"].(string)) {
			out = append(out, ti)
		}
	}
	answer(w, http.StatusOK, map[string]any{"task_instances": out, "total_entries": len(out)})
}

// runResponse is a DAGRunResponse with every required field.
func runResponse(run *Run) map[string]any {
	conf := run.Conf
	if conf == nil {
		conf = json.RawMessage("null")
	}
	var start, end any
	if run.State != "queued" {
		start = run.QueuedAt
	}
	if run.State == "success" || run.State == "failed" {
		end = time.Now().UTC()
	}
	runAfter := run.QueuedAt
	if run.LogicalDate != nil {
		runAfter = *run.LogicalDate
	}
	return map[string]any{
		"dag_run_id": run.DagRunID, "dag_id": run.DagID, "logical_date": run.LogicalDate,
		"queued_at": run.QueuedAt, "start_date": start, "end_date": end, "duration": nil,
		"data_interval_start": run.DataIntervalStart, "data_interval_end": run.DataIntervalEnd,
		"run_after": runAfter, "last_scheduling_decision": nil, "run_type": "manual",
		"state": run.State, "triggered_by": "rest_api", "triggering_user_name": "bridge",
		"conf": conf, "note": run.Note, "dag_versions": []any{}, "bundle_version": nil,
		"dag_display_name": run.DagID,
	}
}

// taskInstance is the part of a TaskInstanceResponse a reader of failures needs, with the
// schema's names and types.
func taskInstance(run *Run, taskID, state string) map[string]any {
	return map[string]any{
		"id": fmt.Sprintf("%s-%s-%s", run.DagID, run.DagRunID, taskID), "task_id": taskID,
		"dag_id": run.DagID, "dag_run_id": run.DagRunID, "map_index": -1, "logical_date": run.LogicalDate,
		"state": state, "try_number": 1, "max_tries": 0, "task_display_name": taskID,
		"dag_display_name": run.DagID, "operator": "PythonOperator", "note": nil,
	}
}
