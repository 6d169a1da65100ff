package tests

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/backfillsvc/backfill/api"
	"github.com/stretchr/testify/require"
)

// TestMalformedRequestsAreRejectedWithoutWriting sends requests that each break the spec in
// one way, and checks the exact status and problem code, that nothing was written, and that
// nothing answers 5xx. A DAG "m" with no backfill exists, so that every body below would
// create something if it were accepted.
func TestMalformedRequestsAreRejectedWithoutWriting(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.PutDag("m", "@daily", "")
	run := e.CreateManualRun("m", day(2, 1), nil)

	// valid is a creation body that would succeed; each case below breaks one thing.
	valid := func(extra ...string) string {
		fields := map[string]string{
			"dag_id": `"m"`, "from_date": `"2024-01-01T00:00:00Z"`, "to_date": `"2024-01-03T00:00:00Z"`,
		}
		for i := 0; i+1 < len(extra); i += 2 {
			if extra[i+1] == "" {
				delete(fields, extra[i])
				continue
			}
			fields[extra[i]] = extra[i+1]
		}
		parts := make([]string, 0, len(fields))
		for k, v := range fields {
			parts = append(parts, fmt.Sprintf("%q:%s", k, v))
		}
		return "{" + strings.Join(parts, ",") + "}"
	}
	huge := `{"dag_id":"m","from_date":"2024-01-01T00:00:00Z","to_date":"2024-01-03T00:00:00Z","description":"` +
		strings.Repeat("x", 1<<20) + `"}`
	runPath := runPath("m", run.RunId)

	type tc struct {
		name    string
		method  string
		path    string
		body    any // nil: no body
		headers []string
		status  int
		code    string
	}
	bad := func(name, method, path string, body any, headers ...string) tc {
		return tc{name, method, path, body, headers, http.StatusBadRequest, "invalid_request"}
	}
	cases := []tc{
		// Bodies of POST /backfills.
		bad("broken JSON", "POST", "/api/v1/backfills", `{"dag_id": "m",`),
		bad("JSON syntax error on line 2", "POST", "/api/v1/backfills", "{\"dag_id\":\"m\",\n\"from_date\": 2024-01-01}"),
		bad("JSON array body", "POST", "/api/v1/backfills", `[]`),
		bad("JSON string body", "POST", "/api/v1/backfills", `"m"`),
		bad("JSON null body", "POST", "/api/v1/backfills", `null`),
		bad("trailing data", "POST", "/api/v1/backfills", valid()+` {}`),
		bad("unknown field", "POST", "/api/v1/backfills", valid("foo", `1`)),
		bad("Airflow's dag_run_id is unknown here", "POST", "/api/v1/backfills", valid("dag_run_id", `"x"`)),
		bad("string for max_active_runs", "POST", "/api/v1/backfills", valid("max_active_runs", `"5"`)),
		bad("fractional max_active_runs", "POST", "/api/v1/backfills", valid("max_active_runs", `2.5`)),
		bad("number for dag_id", "POST", "/api/v1/backfills", valid("dag_id", `123`)),
		bad("null dag_id", "POST", "/api/v1/backfills", valid("dag_id", `null`)),
		bad("string for run_backwards", "POST", "/api/v1/backfills", valid("run_backwards", `"true"`)),
		bad("array for dag_run_conf", "POST", "/api/v1/backfills", valid("dag_run_conf", `[1,2]`)),
		bad("string for dag_run_conf", "POST", "/api/v1/backfills", valid("dag_run_conf", `"x"`)),
		bad("missing dag_id", "POST", "/api/v1/backfills", valid("dag_id", "")),
		bad("missing from_date", "POST", "/api/v1/backfills", valid("from_date", "")),
		bad("missing to_date", "POST", "/api/v1/backfills", valid("to_date", "")),
		bad("empty object", "POST", "/api/v1/backfills", `{}`),
		bad("reprocess_behavior sometimes", "POST", "/api/v1/backfills", valid("reprocess_behavior", `"sometimes"`)),
		bad("month 13", "POST", "/api/v1/backfills", valid("from_date", `"2024-13-01T00:00:00Z"`)),
		bad("date without time", "POST", "/api/v1/backfills", valid("from_date", `"2024-01-01"`)),
		bad("timestamp without offset", "POST", "/api/v1/backfills", valid("to_date", `"2024-01-03T00:00:00"`)),
		bad("February 30th", "POST", "/api/v1/backfills", valid("from_date", `"2024-02-30T00:00:00Z"`)),
		bad("hour 25", "POST", "/api/v1/backfills", valid("to_date", `"2024-01-03T25:00:00Z"`)),
		bad("number for a date", "POST", "/api/v1/backfills", valid("from_date", `1704067200`)),
		bad("max_active_runs 0", "POST", "/api/v1/backfills", valid("max_active_runs", `0`)),
		bad("max_active_runs 1001", "POST", "/api/v1/backfills", valid("max_active_runs", `1001`)),
		bad("dag_id breaking its pattern", "POST", "/api/v1/backfills", valid("dag_id", `"bad id!"`)),
		bad("dag_id of 251 chars", "POST", "/api/v1/backfills", valid("dag_id", `"`+strings.Repeat("m", 251)+`"`)),
		bad("empty dag_id", "POST", "/api/v1/backfills", valid("dag_id", `""`)),
		bad("description too long", "POST", "/api/v1/backfills", valid("description", `"`+strings.Repeat("d", 10001)+`"`)),
		bad("Idempotency-Key of 256 chars", "POST", "/api/v1/backfills", valid(), "Idempotency-Key", strings.Repeat("k", 256)),
		bad("Idempotency-Key not printable ASCII", "POST", "/api/v1/backfills", valid(), "Idempotency-Key", "ключ"),
		bad("wrong Content-Type", "POST", "/api/v1/backfills", valid(), "Content-Type", "text/plain"),
		bad("form Content-Type", "POST", "/api/v1/backfills", valid(), "Content-Type", "application/x-www-form-urlencoded"),
		bad("no Content-Type", "POST", "/api/v1/backfills", valid(), "Content-Type", ""),
		bad("two unknown fields", "POST", "/api/v1/backfills", valid("foo", `1`, "bar", `2`)),
		bad("dates without time", "POST", "/api/v1/backfills", valid("from_date", `"2024-03-01"`, "to_date", `"2024-03-02"`)),
		bad("empty body", "POST", "/api/v1/backfills", ``),
		bad("no body at all", "POST", "/api/v1/backfills", nil),
		{"body over 1 MiB", "POST", "/api/v1/backfills", huge, nil, http.StatusRequestEntityTooLarge, "payload_too_large"},
		bad("dry run: string for run_backwards", "POST", "/api/v1/backfills/dry_run", valid("run_backwards", `"yes"`)),
		bad("dry run: unknown field", "POST", "/api/v1/backfills/dry_run", valid("dry_run", `true`)),
		{"dry run: body over 1 MiB", "POST", "/api/v1/backfills/dry_run", huge, nil, http.StatusRequestEntityTooLarge, "payload_too_large"},

		// Ids in paths.
		bad("backfill id abc", "GET", "/api/v1/backfills/abc", nil),
		bad("backfill id 0", "GET", "/api/v1/backfills/0", nil),
		bad("backfill id -1", "GET", "/api/v1/backfills/-1", nil),
		bad("backfill id 1.5", "GET", "/api/v1/backfills/1.5/dag_runs", nil),
		bad("backfill id past int64", "GET", "/api/v1/backfills/9223372036854775808", nil),
		bad("pause backfill abc", "PUT", "/api/v1/backfills/abc/pause", nil),
		bad("cancel backfill 0", "PUT", "/api/v1/backfills/0/cancel", nil),
		bad("heartbeat run 1.5", "POST", "/api/v1/runs/1.5/heartbeat", `{"worker_id":"w"}`),
		bad("heartbeat run abc", "POST", "/api/v1/runs/abc/heartbeat", `{"worker_id":"w"}`),
		bad("heartbeat without worker_id", "POST", fmt.Sprintf("/api/v1/runs/%d/heartbeat", run.Id), `{}`),

		// Query parameters.
		bad("limit 0", "GET", "/api/v1/backfills?limit=0", nil),
		bad("limit 1001", "GET", "/api/v1/dags?limit=1001", nil),
		bad("limit -1", "GET", "/api/v1/dags/m/runs?limit=-1", nil),
		bad("offset -1", "GET", "/api/v1/backfills?offset=-1", nil),
		bad("run list state done", "GET", "/api/v1/dags/m/runs?state=done", nil),
		bad("run list backfill_id 0", "GET", "/api/v1/dags/m/runs?backfill_id=0", nil),
		bad("run list backfill_id abc", "GET", "/api/v1/dags/m/runs?backfill_id=abc", nil),
		bad("backfill list state done", "GET", "/api/v1/backfills?state=done", nil),
		bad("backfill list active maybe", "GET", "/api/v1/backfills?active=maybe", nil),

		// Claims.
		bad("claim limit 0", "POST", "/api/v1/runs/claim", `{"worker_id":"w","limit":0}`),
		bad("claim limit 101", "POST", "/api/v1/runs/claim", `{"worker_id":"w","limit":101}`),
		bad("claim lease_seconds 9", "POST", "/api/v1/runs/claim", `{"worker_id":"w","lease_seconds":9}`),
		bad("claim lease_seconds 3601", "POST", "/api/v1/runs/claim", `{"worker_id":"w","lease_seconds":3601}`),
		bad("claim without worker_id", "POST", "/api/v1/runs/claim", `{"limit":1}`),
		bad("claim empty worker_id", "POST", "/api/v1/runs/claim", `{"worker_id":""}`),
		bad("claim worker_id of 256 chars", "POST", "/api/v1/runs/claim", `{"worker_id":"`+strings.Repeat("w", 256)+`"}`),
		bad("claim dag_id breaking its pattern", "POST", "/api/v1/runs/claim", `{"worker_id":"w","dag_id":"a b"}`),
		bad("claim unknown field", "POST", "/api/v1/runs/claim", `{"worker_id":"w","queue":"x"}`),

		// DAGs.
		bad("PUT dag without schedule", "PUT", "/api/v1/dags/new_dag", `{"timezone":"UTC"}`),
		bad("PUT dag empty schedule", "PUT", "/api/v1/dags/new_dag", `{"schedule":""}`),
		bad("PUT dag max_active_runs 0", "PUT", "/api/v1/dags/new_dag", `{"schedule":"@daily","max_active_runs":0}`),
		bad("PUT dag max_active_runs 1001", "PUT", "/api/v1/dags/new_dag", `{"schedule":"@daily","max_active_runs":1001}`),
		bad("PUT dag string is_paused", "PUT", "/api/v1/dags/new_dag", `{"schedule":"@daily","is_paused":"true"}`),
		bad("PUT dag empty timezone", "PUT", "/api/v1/dags/new_dag", `{"schedule":"@daily","timezone":""}`),
		bad("PUT dag unknown field", "PUT", "/api/v1/dags/new_dag", `{"schedule":"@daily","owner":"me"}`),
		bad("PUT dag id with a space", "PUT", "/api/v1/dags/bad%20id", `{"schedule":"@daily"}`),
		bad("PUT dag id of 251 chars", "PUT", "/api/v1/dags/"+strings.Repeat("d", 251), `{"schedule":"@daily"}`),
		bad("PUT dag broken JSON", "PUT", "/api/v1/dags/new_dag", `{"schedule":`),
		{"PUT dag body over 1 MiB", "PUT", "/api/v1/dags/new_dag", `{"schedule":"@daily","description":"` + strings.Repeat("x", 1<<20) + `"}`, nil, http.StatusRequestEntityTooLarge, "payload_too_large"},

		// Runs.
		bad("run without logical_date", "POST", "/api/v1/dags/m/runs", `{"conf":{}}`),
		bad("run logical_date yesterday", "POST", "/api/v1/dags/m/runs", `{"logical_date":"yesterday"}`),
		bad("run logical_date without offset", "POST", "/api/v1/dags/m/runs", `{"logical_date":"2024-01-05T00:00:00"}`),
		bad("run conf array", "POST", "/api/v1/dags/m/runs", `{"logical_date":"2024-01-05T00:00:00Z","conf":[]}`),
		bad("run unknown field", "POST", "/api/v1/dags/m/runs", `{"logical_date":"2024-01-05T00:00:00Z","run_id":"x"}`),
		bad("run dag id with a space", "POST", "/api/v1/dags/bad%20id/runs", `{"logical_date":"2024-01-05T00:00:00Z"}`),
		bad("patch state done", "PATCH", runPath, `{"state":"done"}`),
		bad("patch without state", "PATCH", runPath, `{"worker_id":"w"}`),
		bad("patch empty worker_id", "PATCH", runPath, `{"state":"success","worker_id":""}`),
		bad("patch array body", "PATCH", runPath, `[{"state":"success"}]`),

		// Precision: timestamps finer than a microsecond are refused, never rounded; numbers
		// that overflow float64 are refused where the spec wants an integer.
		bad("to_date with nanoseconds", "POST", "/api/v1/backfills", valid("to_date", `"2024-01-02T23:59:59.9999995Z"`)),
		bad("from_date with 7 fractional digits", "POST", "/api/v1/backfills", valid("from_date", `"2024-01-01T00:00:00.0000001Z"`)),
		bad("dry run to_date with nanoseconds", "POST", "/api/v1/backfills/dry_run", valid("to_date", `"2024-01-02T23:59:59.999999999Z"`)),
		bad("run logical_date with nanoseconds", "POST", "/api/v1/dags/m/runs", `{"logical_date":"2024-01-05T00:00:00.000000001Z"}`),
		bad("max_active_runs 1e400", "POST", "/api/v1/backfills", valid("max_active_runs", `1e400`)),
		bad("max_active_runs 2^53+1", "POST", "/api/v1/backfills", valid("max_active_runs", `9007199254740993`)),
		bad("claim limit 1e400", "POST", "/api/v1/runs/claim", `{"worker_id":"w","limit":1e400}`),
		bad("limit 1e400", "GET", "/api/v1/backfills?limit=1e400", nil),
		bad("run conf with NUL next to 1e400", "POST", "/api/v1/dags/m/runs", `{"logical_date":"2024-01-05T00:00:00Z","conf":{"n":1e400,"s":"\u0000"}}`),

		// Well-formed, but nothing there.
		{"unknown backfill", "GET", "/api/v1/backfills/424242", nil, nil, http.StatusNotFound, "backfill_not_found"},
		{"pause unknown backfill", "PUT", "/api/v1/backfills/424242/pause", nil, nil, http.StatusNotFound, "backfill_not_found"},
		{"run of unknown DAG", "POST", "/api/v1/dags/ghost/runs", `{"logical_date":"2024-01-05T00:00:00Z"}`, nil, http.StatusNotFound, "dag_not_found"},
		{"backfill of unknown DAG", "POST", "/api/v1/backfills", valid("dag_id", `"ghost"`), nil, http.StatusNotFound, "dag_not_found"},
		{"heartbeat of unknown run", "POST", "/api/v1/runs/424242/heartbeat", `{"worker_id":"w"}`, nil, http.StatusNotFound, "run_not_found"},
		{"unknown route", "GET", "/api/v1/nothing-here", nil, nil, http.StatusNotFound, "not_found"},
		{"method not allowed", "POST", "/api/v1/dags/m", nil, nil, http.StatusMethodNotAllowed, "method_not_allowed"},

		// Well-formed but semantically impossible.
		// Text the database cannot store, on every kind of body, the dry run's included.
		bad("run conf with lone high surrogate", "POST", "/api/v1/dags/m/runs", `{"logical_date":"2024-01-06T00:00:00Z","conf":{"s":"\ud800"}}`),
		bad("run conf key with lone surrogate", "POST", "/api/v1/dags/m/runs", `{"logical_date":"2024-01-06T00:00:00Z","conf":{"\ud800":1}}`),
		bad("run conf with invalid UTF-8", "POST", "/api/v1/dags/m/runs", "{\"logical_date\":\"2024-01-06T00:00:00Z\",\"conf\":{\"s\":\"\xff\"}}"),
		bad("backfill conf with lone low surrogate", "POST", "/api/v1/backfills", valid("dag_run_conf", `{"s":"x\udc00"}`)),
		bad("backfill conf with invalid UTF-8", "POST", "/api/v1/backfills", valid("dag_run_conf", "{\"s\":\"\xc3\"}")),
		bad("backfill conf with NUL", "POST", "/api/v1/backfills", valid("dag_run_conf", `{"s":["\u0000"]}`)),
		bad("backfill description with surrogate then letter", "POST", "/api/v1/backfills", valid("description", `"\ud800\u0041"`)),
		bad("dry run: conf with lone surrogate", "POST", "/api/v1/backfills/dry_run", valid("dag_run_conf", `{"s":"\ud800"}`)),
		bad("dry run: conf with invalid UTF-8", "POST", "/api/v1/backfills/dry_run", valid("dag_run_conf", "{\"s\":\"\xff\xfe\"}")),
		bad("dry run: conf with NUL", "POST", "/api/v1/backfills/dry_run", valid("dag_run_conf", `{"s":"\u0000"}`)),
		bad("dag description with lone surrogate", "PUT", "/api/v1/dags/new_dag", `{"schedule":"@daily","description":"\udfff"}`),
		bad("dag description with invalid UTF-8", "PUT", "/api/v1/dags/new_dag", "{\"schedule\":\"@daily\",\"description\":\"\xed\xa0\x80\"}"),
		bad("report note with lone surrogate", "PATCH", runPath, `{"state":"success","note":"\ud83d"}`),
		bad("claim worker_id with lone surrogate", "POST", "/api/v1/runs/claim", `{"worker_id":"\ud800"}`),
		bad("webhook url with lone surrogate", "POST", "/api/v1/webhooks", `{"url":"https://example.com/\ud800"}`),
		bad("webhook description with NUL", "POST", "/api/v1/webhooks", `{"url":"https://example.com/h","description":"a\u0000"}`),
		bad("run id with invalid UTF-8", "GET", "/api/v1/dags/m/runs/%ff", nil),
		bad("report run id with a lone surrogate's bytes", "PATCH", "/api/v1/dags/m/runs/%ed%a0%80", `{"state":"success"}`),
		bad("run id with NUL", "GET", "/api/v1/dags/m/runs/a%00b", nil),
		// A dot segment as a name: no client that normalises URLs could reach it again.
		bad("dag_id of one dot", "PUT", "/api/v1/dags/.", `{"schedule":"@daily"}`),
		bad("dag_id of two dots", "PUT", "/api/v1/dags/..", `{"schedule":"@daily"}`),
		bad("pool named two dots", "PUT", "/api/v1/pools/..", `{"slots":1}`),
		bad("backfill in a pool named one dot", "POST", "/api/v1/backfills", valid("pool", `"."`)),
		bad("query with invalid UTF-8", "GET", "/api/v1/backfills?x=%ff", nil),
		{"webhook port 99999", "POST", "/api/v1/webhooks", `{"url":"https://example.com:99999/h"}`, nil, http.StatusUnprocessableEntity, "invalid_webhook"},
		{"webhook port 0", "POST", "/api/v1/webhooks", `{"url":"http://example.com:0/h"}`, nil, http.StatusUnprocessableEntity, "invalid_webhook"},
		{"inverted window", "POST", "/api/v1/backfills", valid("from_date", `"2024-01-09T00:00:00Z"`), nil, http.StatusUnprocessableEntity, "invalid_backfill"},
		{"empty window", "POST", "/api/v1/backfills", valid("from_date", `"2024-01-01T06:00:00Z"`, "to_date", `"2024-01-01T07:00:00Z"`), nil, http.StatusUnprocessableEntity, "no_runs_to_create"},
		{"@every schedule", "PUT", "/api/v1/dags/new_dag", `{"schedule":"@every 1h"}`, nil, http.StatusUnprocessableEntity, "invalid_dag"},
		{"unknown timezone", "PUT", "/api/v1/dags/new_dag", `{"schedule":"@daily","timezone":"Nowhere/Atlantis"}`, nil, http.StatusUnprocessableEntity, "invalid_dag"},
	}
	// The table is the test: it must stay broad (at least 100 cases), each case must be told
	// apart by its name, and each must say which 4xx and which code it expects.
	require.GreaterOrEqual(t, len(cases), 100, "the malformed-request table shrank")
	names := make(map[string]bool, len(cases))
	for _, c := range cases {
		require.False(t, names[c.name], "two cases are named %q", c.name)
		names[c.name] = true
		require.True(t, c.status >= 400 && c.status < 500, "%s: expects %d, not a 4xx", c.name, c.status)
		require.NotEmpty(t, c.code, "%s: expects no problem code", c.name)
	}

	// What a person reads: the detail of these cases, exactly. A date says what it must be
	// with an example (never the format's regular expression), broken JSON says where, and a
	// body sent as anything but JSON says to send application/json.
	const rfc3339 = "must be an RFC 3339 date-time such as 2024-03-01T00:00:00Z"
	sendJSON := func(got string) string {
		return "Content-Type must be application/json: send the body as JSON with the header Content-Type: application/json (this request has " + got + ")"
	}
	details := map[string]string{
		"date without time":                 "from_date " + rfc3339,
		"dates without time":                "from_date " + rfc3339 + "; to_date " + rfc3339,
		"timestamp without offset":          "to_date " + rfc3339,
		"run logical_date yesterday":        "logical_date " + rfc3339,
		"February 30th":                     "from_date " + rfc3339 + " (day out of range)",
		"broken JSON":                       "body is not valid JSON: it ends at line 1, column 16 before the JSON value is complete",
		"JSON syntax error on line 2":       "body is not valid JSON: invalid character '-' after object key:value pair at line 2, column 19",
		"PUT dag broken JSON":               "body is not valid JSON: it ends at line 1, column 13 before the JSON value is complete",
		"wrong Content-Type":                sendJSON(`Content-Type "text/plain"`),
		"form Content-Type":                 sendJSON(`Content-Type "application/x-www-form-urlencoded"`),
		"no Content-Type":                   sendJSON("no Content-Type"),
		"unknown field":                     "foo is not a field of this request",
		"two unknown fields":                "bar is not a field of this request; foo is not a field of this request",
		"claim unknown field":               "queue is not a field of this request",
		"empty body":                        "body is required: send a JSON object",
		"max_active_runs 1001":              "max_active_runs must be at most 1000",
		"reprocess_behavior sometimes":      "reprocess_behavior must be one of none, failed, completed",
		"string for max_active_runs":        "max_active_runs must be an integer",
		"run conf with NUL next to 1e400":   "conf.s must not contain the NUL character",
		"run conf with lone high surrogate": "conf.s must not contain a lone UTF-16 surrogate escape",
		"dry run: conf with invalid UTF-8":  "dag_run_conf.s must be valid UTF-8",
		"backfill conf with NUL":            "dag_run_conf.s.0 must not contain the NUL character",
	}
	fieldsOf := map[string][]api.FieldError{
		"dates without time": {{Field: "from_date", Message: rfc3339}, {Field: "to_date", Message: rfc3339}},
		"two unknown fields": {{Field: "bar", Message: "is not a field of this request"}, {Field: "foo", Message: "is not a field of this request"}},
		"no Content-Type":    {{Field: "Content-Type", Message: strings.TrimPrefix(sendJSON("no Content-Type"), "Content-Type ")}},
	}
	for name := range details {
		require.True(t, names[name], "details names no case %q", name)
	}

	before := e.TableCounts()
	for _, c := range cases {
		res, err := e.do(c.method, c.path, c.body, c.headers...)
		require.NoError(t, err, c.name)
		require.Less(t, res.Status, 500, "%s: never a 5xx: %s", c.name, res.Body)
		require.Equal(t, c.status, res.Status, "%s: %s", c.name, res.Body)
		p := requireProblem(t, res, c.status, c.code)
		require.NotEmpty(t, p.Detail, c.name)
		if want, ok := details[c.name]; ok {
			require.Equal(t, want, p.Detail, c.name)
		}
		if want, ok := fieldsOf[c.name]; ok {
			require.Equal(t, want, *p.Errors, c.name)
		}
		if c.status == http.StatusMethodNotAllowed {
			// RFC 9110 §15.5.6: the methods /dags/{dag_id} does take.
			require.Equal(t, "GET, PUT, DELETE", res.Header.Get("Allow"), c.name)
		}
		// No answer quotes a format's regular expression or ends a sentence in nothing.
		require.NotContains(t, p.Detail, "(0[1-9]|", c.name)
		require.NotRegexp(t, `: *(;|$)`, p.Detail, c.name)
		require.Less(t, len(p.Detail), 400, "%s: a detail a person reads: %s", c.name, p.Detail)
		require.Equal(t, before, e.TableCounts(), "%s wrote something", c.name)
	}

	// The DAG was never blocked: a valid request still goes through.
	res := e.Do(http.MethodPost, "/api/v1/backfills", valid())
	require.Equal(t, http.StatusCreated, res.Status, "body: %s", res.Body)
}
