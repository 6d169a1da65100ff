package airflowfake

import (
	"net/http"
	"strconv"
)

// listDAGs is GET /api/v2/dags (get_dags), paged by limit (default 50) and offset;
// answer DAGCollectionResponse.
func (f *Fake) listDAGs(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, offset := 50, 0
	for name, p := range map[string]*int{"limit": &limit, "offset": &offset} {
		if s := q.Get(name); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < 0 {
				answer(w, http.StatusUnprocessableEntity, validation("int_parsing", []any{"query", name}, "Input should be a valid integer", s))
				return
			}
			*p = n
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	out := []map[string]any{}
	for i := offset; i < len(f.dagOrder) && len(out) < limit; i++ {
		out = append(out, dagResponse(f.dags[f.dagOrder[i]]))
	}
	answer(w, http.StatusOK, map[string]any{"dags": out, "total_entries": len(f.dagOrder)})
}

// dagDetails is GET /api/v2/dags/{dag_id}/details (get_dag_details); answer
// DAGDetailsResponse.
func (f *Fake) dagDetails(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	d, ok := f.dag(w, r)
	if !ok {
		return
	}
	resp := dagResponse(d)
	for k, v := range map[string]any{
		"catchup": false, "dag_run_timeout": nil, "asset_expression": nil, "doc_md": nil,
		"start_date": nil, "end_date": nil, "is_paused_upon_creation": nil, "params": map[string]any{},
		"render_template_as_native_obj": false, "template_search_path": nil, "timezone": d.Timezone,
		"last_parsed": nil, "default_args": map[string]any{}, "concurrency": 16, "latest_dag_version": nil,
	} {
		resp[k] = v
	}
	answer(w, http.StatusOK, resp)
}

// dagResponse is a DAGResponse with every required field.
func dagResponse(d DAG) map[string]any {
	var maxActive any
	if d.MaxActiveRuns > 0 {
		maxActive = d.MaxActiveRuns
	}
	return map[string]any{
		"dag_id": d.DagID, "dag_display_name": d.DagID, "is_paused": d.IsPaused, "is_stale": false,
		"last_parsed_time": nil, "last_expired": nil, "bundle_name": "dags-folder", "bundle_version": nil,
		"relative_fileloc": d.DagID + ".py", "fileloc": "/opt/airflow/dags/" + d.DagID + ".py",
		"description": nil, "timetable_summary": d.TimetableSummary, "timetable_description": nil,
		"tags": []any{}, "max_active_tasks": 16, "max_active_runs": maxActive,
		"max_consecutive_failed_dag_runs": 0, "has_task_concurrency_limits": false, "has_import_errors": false,
		"next_dagrun_logical_date": nil, "next_dagrun_data_interval_start": nil,
		"next_dagrun_data_interval_end": nil, "next_dagrun_run_after": nil, "owners": []string{"airflow"},
		"file_token": "token",
	}
}
