package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/api"
	"github.com/backfillsvc/backfill/client"
	"github.com/getkin/kin-openapi/openapi3"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"
)

// The contract's "Exact at any size": a conf comes back as PostgreSQL's jsonb keeps it, run ids
// keep fractional seconds, and timestamps finer than a microsecond are refused.

// exactConf holds numbers that float64 cannot carry: 2^53+1 (rounds to 2^53), 0.1 (not a
// binary fraction) and 1e400 (overflows float64 entirely).
const exactConf = `{"big": 9007199254740993, "tenth": 0.1, "huge": 1e400, "nested": {"list": [9007199254740993, -0.5e-3]}}`

// jsonbOf is the conf as the database's jsonb hands it back, decoded with exact numbers.
func jsonbOf(t *testing.T, e *env, raw string) any {
	t.Helper()
	var text string
	require.NoError(t, e.DB.GetContext(context.Background(), &text, `SELECT $1::jsonb::text`, raw))
	return exactJSON(t, []byte(text))
}

// exactJSON decodes JSON keeping every number as its literal digits (json.Number).
func exactJSON(t *testing.T, data []byte) any {
	t.Helper()
	var v any
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	require.NoError(t, dec.Decode(&v), "body: %s", data)
	return v
}

// confField extracts one field of an answer with exact numbers.
func confField(t *testing.T, body []byte, path ...any) any {
	t.Helper()
	v := exactJSON(t, body)
	for _, step := range path {
		switch s := step.(type) {
		case string:
			v = v.(map[string]any)[s]
		case int:
			v = v.([]any)[s]
		}
	}
	return v
}

// requireConf checks an answered conf against want (any value JSON can encode; nil for null),
// as JSON values: a conf is the raw JSON the service answered, not Go values.
func requireConf(t testing.TB, want any, got *api.Conf, msgAndArgs ...any) {
	t.Helper()
	raw, err := json.Marshal(want)
	require.NoError(t, err)
	if string(raw) == "null" { // nil, or a nil map
		require.Nil(t, got, msgAndArgs...)
		return
	}
	require.NotNil(t, got, msgAndArgs...)
	require.JSONEq(t, string(raw), string(*got), msgAndArgs...)
}

func TestConfKeepsEveryNumberOnEveryEndpoint(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const dag = "exact_conf"
	e.PutDag(dag, "@daily", "")
	want := jsonbOf(t, e, exactConf)
	// What jsonb keeps is the literal digits: 2^53+1 stays odd, 1e400 is written out.
	require.Equal(t, json.Number("9007199254740993"), want.(map[string]any)["big"])
	require.Equal(t, json.Number("0.1"), want.(map[string]any)["tenth"])
	require.Len(t, string(want.(map[string]any)["huge"].(json.Number)), 401)

	body := fmt.Sprintf(`{"dag_id": %q, "from_date": "2024-01-01T00:00:00Z", "to_date": "2024-01-02T00:00:00Z",
		"max_active_runs": 5, "dag_run_conf": %s}`, dag, exactConf)

	dry := e.Do(http.MethodPost, "/api/v1/backfills/dry_run", body)
	require.Equal(t, http.StatusOK, dry.Status, "body: %s", dry.Body)

	created := e.Do(http.MethodPost, "/api/v1/backfills", body, "Idempotency-Key", "exact-conf")
	require.Equal(t, http.StatusCreated, created.Status, "body: %s", created.Body)
	require.Equal(t, want, confField(t, created.Body, "dag_run_conf"), "POST /backfills")
	id, err := confField(t, created.Body, "id").(json.Number).Int64()
	require.NoError(t, err)

	replay := e.Do(http.MethodPost, "/api/v1/backfills", body, "Idempotency-Key", "exact-conf")
	require.Equal(t, http.StatusCreated, replay.Status, "body: %s", replay.Body)
	require.Equal(t, "true", replay.Header.Get("Idempotent-Replayed"))
	require.Equal(t, want, confField(t, replay.Body, "dag_run_conf"), "replay")

	got := e.Do(http.MethodGet, fmt.Sprintf("/api/v1/backfills/%d", id), nil)
	require.Equal(t, want, confField(t, got.Body, "dag_run_conf"), "GET /backfills/{id}")
	list := e.Do(http.MethodGet, "/api/v1/backfills?dag_id="+dag, nil)
	require.Equal(t, want, confField(t, list.Body, "backfills", 0, "dag_run_conf"), "GET /backfills")

	runs := e.Do(http.MethodGet, "/api/v1/dags/"+dag+"/runs", nil)
	require.Equal(t, want, confField(t, runs.Body, "dag_runs", 0, "conf"), "GET runs")
	require.Equal(t, want, confField(t, runs.Body, "dag_runs", 1, "conf"), "GET runs")

	claim := e.Do(http.MethodPost, "/api/v1/runs/claim", map[string]any{"worker_id": "w", "limit": 2})
	require.Equal(t, http.StatusOK, claim.Status, "body: %s", claim.Body)
	require.Equal(t, want, confField(t, claim.Body, "runs", 0, "conf"), "claim")
	require.Equal(t, want, confField(t, claim.Body, "runs", 1, "conf"), "claim")

	manual := e.Do(http.MethodPost, "/api/v1/dags/"+dag+"/runs",
		`{"logical_date": "2024-02-01T00:00:00Z", "conf": `+exactConf+`}`)
	require.Equal(t, http.StatusCreated, manual.Status, "body: %s", manual.Body)
	require.Equal(t, want, confField(t, manual.Body, "conf"), "POST runs")
	one := e.Do(http.MethodGet, "/api/v1/dags/"+dag+"/runs/"+url.PathEscape("manual__2024-02-01T00:00:00Z"), nil)
	require.Equal(t, want, confField(t, one.Body, "conf"), "GET run")

	// And in the database itself: one value everywhere, the one jsonb made of the request.
	var distinct []string
	require.NoError(t, e.DB.Select(&distinct, `
		SELECT DISTINCT c::text FROM (
			SELECT conf AS c FROM dag_runs UNION ALL SELECT dag_run_conf FROM backfills
			UNION ALL SELECT dag_run_conf FROM idempotency_keys) x`))
	require.Len(t, distinct, 1)
	require.Equal(t, want, exactJSON(t, []byte(distinct[0])))
}

// A NUL in a string is refused as 400 even when a number of the same body overflows float64.
func TestConfWithHugeNumberAndNULIs400(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.PutDag("exact_nul", "@daily", "")
	res := e.Do(http.MethodPost, "/api/v1/dags/exact_nul/runs",
		`{"logical_date": "2024-02-01T00:00:00Z", "conf": {"huge": 1e400, "s": "a\u0000b"}}`)
	p := requireProblem(t, res, http.StatusBadRequest, "invalid_request")
	require.NotNil(t, p.Errors)
	require.Equal(t, "conf.s", (*p.Errors)[0].Field, "body: %s", res.Body)
}

func TestIdempotencyComparesConfAsJsonbValues(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const dag = "exact_idem"
	e.PutDag(dag, "@daily", "")
	post := func(key, conf string) *response {
		t.Helper()
		body := `{"dag_id": "` + dag + `", "from_date": "2024-01-01T00:00:00Z", "to_date": "2024-01-03T00:00:00Z"`
		if conf != "" {
			body += `, "dag_run_conf": ` + conf
		}
		return e.Do(http.MethodPost, "/api/v1/backfills", body+"}", "Idempotency-Key", key)
	}
	first := post("k-big", `{"n": 9007199254740993}`)
	require.Equal(t, http.StatusCreated, first.Status, "body: %s", first.Body)
	var b api.Backfill
	first.Decode(t, &b)

	cases := []struct {
		name, conf string
		replay     bool
	}{
		// One unit apart at 2^53: the same float64, different requests.
		{"2^53 is not 2^53+1", `{"n": 9007199254740992}`, false},
		{"2^53+2 is not 2^53+1", `{"n": 9007199254740994}`, false},
		{"an extra key", `{"n": 9007199254740993, "m": 1}`, false},
		{"no conf", ``, false},
		{"null conf", `null`, false},
		{"empty conf", `{}`, false},
		{"1e400 differs", `{"n": 1e400}`, false},
		{"the same request", `{"n": 9007199254740993}`, true},
		{"the same value spelled otherwise", `{ "n" : 9007199254740993.0 }`, true},
		{"the same value in exponent form", `{"n": 9.007199254740993e15}`, true},
	}
	for _, c := range cases {
		res := post("k-big", c.conf)
		if c.replay {
			require.Equal(t, http.StatusCreated, res.Status, "%s: body: %s", c.name, res.Body)
			require.Equal(t, "true", res.Header.Get("Idempotent-Replayed"), c.name)
			var got api.Backfill
			res.Decode(t, &got)
			require.Equal(t, b.Id, got.Id, c.name)
			continue
		}
		requireProblem(t, res, http.StatusUnprocessableEntity, "idempotency_key_reused")
	}

	// Key order is not part of a jsonb value. The other DAG's backfill is still active, so the
	// first request of this key goes to its own DAG.
	e.PutDag(dag+"_order", "@daily", "")
	ordered := func(conf string) *response {
		t.Helper()
		return e.Do(http.MethodPost, "/api/v1/backfills", `{"dag_id": "`+dag+`_order", "from_date": "2024-01-01T00:00:00Z",
			"to_date": "2024-01-03T00:00:00Z", "dag_run_conf": `+conf+`}`, "Idempotency-Key", "k-order")
	}
	res := ordered(`{"a": 1, "b": {"x": [1, 2], "y": 0.1}}`)
	require.Equal(t, http.StatusCreated, res.Status, "body: %s", res.Body)
	res = ordered(`{"b": {"y": 0.10, "x": [1, 2]}, "a": 1}`)
	require.Equal(t, http.StatusCreated, res.Status, "body: %s", res.Body)
	require.Equal(t, "true", res.Header.Get("Idempotent-Replayed"))
	// Array order is.
	requireProblem(t, ordered(`{"a": 1, "b": {"x": [2, 1], "y": 0.1}}`), http.StatusUnprocessableEntity, "idempotency_key_reused")

	require.Equal(t, 2, e.Count(`SELECT count(*) FROM backfills`), "refused and replayed requests create nothing")
}

func TestRunIDsKeepFractionalSeconds(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const dag = "exact_ids"
	e.PutDag(dag, "@daily", "")
	create := func(logical string) *response {
		t.Helper()
		return e.Do(http.MethodPost, "/api/v1/dags/"+dag+"/runs", map[string]any{"logical_date": logical})
	}
	cases := []struct{ logical, runID string }{
		{"2024-01-01T00:00:00.5Z", "manual__2024-01-01T00:00:00.5Z"},
		// The same instant without its fraction is another run, not a false 409.
		{"2024-01-01T00:00:00Z", "manual__2024-01-01T00:00:00Z"},
		{"2024-01-01T00:00:00.000001Z", "manual__2024-01-01T00:00:00.000001Z"},
		{"2024-01-01T02:00:00.123450+02:00", "manual__2024-01-01T00:00:00.12345Z"},
		{"2024-01-01T00:00:00.100Z", "manual__2024-01-01T00:00:00.1Z"},
	}
	for _, c := range cases {
		res := create(c.logical)
		require.Equal(t, http.StatusCreated, res.Status, "%s: body: %s", c.logical, res.Body)
		var run api.DagRun
		res.Decode(t, &run)
		require.Equal(t, c.runID, run.RunId, c.logical)
		require.Equal(t, "/api/v1/dags/"+dag+"/runs/"+url.PathEscape(c.runID), res.Header.Get("Location"))
		got := e.GetRun(dag, c.runID)
		require.Equal(t, run.Id, got.Id)
	}
	// The same instant again, spelled otherwise, is the run that exists.
	requireProblem(t, create("2024-01-01T01:00:00.50+01:00"), http.StatusConflict, "run_already_exists")
}

func TestSubMicrosecondTimestampsAre400(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const dag = "exact_nanos"
	e.PutDag(dag, "@daily", "")
	backfill := func(from, to string) string {
		return `{"dag_id": "` + dag + `", "from_date": "` + from + `", "to_date": "` + to + `"}`
	}
	cases := []struct {
		name, path, body, field string
	}{
		// 23:59:59.9999995 used to round to the next midnight and gain that day's slot.
		{"to_date", "/api/v1/backfills", backfill("2024-01-01T00:00:00Z", "2024-01-02T23:59:59.9999995Z"), "to_date"},
		{"from_date", "/api/v1/backfills", backfill("2024-01-01T00:00:00.0000001Z", "2024-01-03T00:00:00Z"), "from_date"},
		{"dry run to_date", "/api/v1/backfills/dry_run", backfill("2024-01-01T00:00:00Z", "2024-01-02T23:59:59.999999999Z"), "to_date"},
		{"offset", "/api/v1/backfills", backfill("2024-01-01T01:00:00.1234567+01:00", "2024-01-03T00:00:00Z"), "from_date"},
		{"logical_date", "/api/v1/dags/" + dag + "/runs", `{"logical_date": "2024-01-01T00:00:00.0000005Z"}`, "logical_date"},
	}
	for _, c := range cases {
		res := e.Do(http.MethodPost, c.path, c.body)
		p := requireProblem(t, res, http.StatusBadRequest, "invalid_request")
		require.NotNil(t, p.Errors, c.name)
		require.Len(t, *p.Errors, 1, c.name)
		require.Equal(t, c.field, (*p.Errors)[0].Field, "%s: body: %s", c.name, res.Body)
	}
	require.Zero(t, e.Count(`SELECT (SELECT count(*) FROM backfills) + (SELECT count(*) FROM dag_runs)`), "a refused request writes nothing")
	// Microseconds are the precision kept, trailing zeros past them are only spelling.
	b := e.CreateBackfill(map[string]any{"dag_id": dag, "from_date": "2024-01-01T00:00:00.000000000Z", "to_date": "2024-01-02T23:59:59.999999000Z"})
	require.EqualValues(t, 2, b.Progress.Total)
	require.Equal(t, time.Date(2024, 1, 2, 23, 59, 59, 999999000, time.UTC), b.ToDate)
}

// strictSchema compiles one component schema of an OpenAPI 3.0 document the way strict
// validators and generators read it: `nullable` adds null to the `type` of its own schema
// object and to nothing else (OpenAPI 3.0.3), so a `nullable` next to an allOf/$ref does not let
// null through the referenced schema; the result is validated as JSON Schema 2020-12 by
// santhosh-tekuri/jsonschema. kin-openapi's own validator (env.Do) is more lenient here: it
// accepts null as soon as a schema says nullable, whatever its allOf says.
func strictSchema(t *testing.T, yaml []byte, name string) *jsonschema.Schema {
	t.Helper()
	doc, err := openapi3.NewLoader().LoadFromData(yaml)
	require.NoError(t, err)
	seen := map[*openapi3.Schema]bool{}
	var walk func(ref *openapi3.SchemaRef)
	walk = func(ref *openapi3.SchemaRef) {
		if ref == nil || ref.Value == nil || seen[ref.Value] {
			return
		}
		s := ref.Value
		seen[s] = true
		if s.Nullable && s.Type != nil && len(*s.Type) > 0 && !s.Type.IncludesNull() {
			types := append(openapi3.Types{}, *s.Type...)
			types = append(types, openapi3.TypeNull)
			s.Type = &types
		}
		s.Nullable = false
		for _, p := range s.Properties {
			walk(p)
		}
		walk(s.Items)
		walk(s.AdditionalProperties.Schema)
		for _, group := range []openapi3.SchemaRefs{s.AllOf, s.AnyOf, s.OneOf} {
			for _, sub := range group {
				walk(sub)
			}
		}
	}
	for _, s := range doc.Components.Schemas {
		walk(s)
	}
	data, err := json.Marshal(doc)
	require.NoError(t, err)
	var root any
	require.NoError(t, json.Unmarshal(data, &root))
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	const url = "file:///openapi.json"
	require.NoError(t, c.AddResource(url, root))
	schema, err := c.Compile(url + "#/components/schemas/" + name)
	require.NoError(t, err)
	return schema
}

func strictValidate(t *testing.T, schema *jsonschema.Schema, body []byte) error {
	t.Helper()
	var v any
	require.NoError(t, json.Unmarshal(body, &v))
	return schema.Validate(v)
}

func TestSkippedSlotListingMatchesSpecStrictly(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const dag = "exact_slots"
	e.PutDag(dag, "@daily", "")
	e.CreateManualRun(dag, day(1, 2), nil) // queued: its slot is skipped "in flight"
	b := e.CreateBackfill(backfillBody(dag, day(1, 1), day(1, 3)))
	res := e.Do(http.MethodGet, fmt.Sprintf("/api/v1/backfills/%d/dag_runs", b.Id), nil)
	require.Equal(t, http.StatusOK, res.Status, "body: %s", res.Body)
	var page api.BackfillDagRunCollection
	res.Decode(t, &page)
	require.Len(t, page.BackfillDagRuns, 3)
	require.Nil(t, page.BackfillDagRuns[1].State, "the skipped slot")
	require.NotNil(t, page.BackfillDagRuns[0].State)

	require.NoError(t, strictValidate(t, strictSchema(t, api.SpecYAML, "BackfillDagRunCollection"), res.Body))

	// The validator is strict where it matters: the slot state as the spec used to write it
	// (nullable next to an allOf) refuses this very listing.
	const old = `
openapi: 3.0.3
info: {title: old slot state, version: "1"}
paths: {}
components:
  schemas:
    DagRunState:
      type: string
      enum: [queued, running, success, failed, canceled]
    Slot:
      type: object
      properties:
        state:
          type: string
          nullable: true
          allOf:
            - $ref: '#/components/schemas/DagRunState'
    BackfillDagRunCollection:
      type: object
      properties:
        backfill_dag_runs:
          type: array
          items: {$ref: '#/components/schemas/Slot'}
`
	require.Error(t, strictValidate(t, strictSchema(t, []byte(old), "BackfillDagRunCollection"), res.Body))
}

// sdkConf is the conf of issue 9 that float64 cannot carry: 2^53+1 and 1e400.
const sdkConf = `{"n": 9007199254740993, "x": 1e400}`

// storedConf is the dag_run_conf the database holds for a backfill, with exact numbers.
func storedConf(t *testing.T, e *env, id int64) any {
	t.Helper()
	var text string
	require.NoError(t, e.DB.GetContext(context.Background(), &text, `SELECT dag_run_conf::text FROM backfills WHERE id = $1`, id))
	return exactJSON(t, []byte(text))
}

func TestSDKKeepsConfExactThroughCreateGetAndClaim(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.PutDag("sdk_exact", "@daily", "")
	ctx := context.Background()
	c := e.sdk(t)
	want := jsonbOf(t, e, sdkConf)
	require.Equal(t, json.Number("9007199254740993"), want.(map[string]any)["n"])

	conf := client.Conf(sdkConf)
	b, err := c.CreateBackfill(ctx, client.BackfillCreate{DagId: "sdk_exact", FromDate: day(1, 1), ToDate: day(1, 1), DagRunConf: &conf}, client.CreateOptions{IdempotencyKey: "sdk-exact"})
	require.NoError(t, err)
	require.Equal(t, want, storedConf(t, e, b.Id), "the SDK sent the conf exactly")
	require.NotNil(t, b.DagRunConf)
	require.Equal(t, want, exactJSON(t, *b.DagRunConf), "create")

	got, err := c.GetBackfill(ctx, b.Id)
	require.NoError(t, err)
	require.Equal(t, want, exactJSON(t, *got.DagRunConf), "get")

	runs, err := c.ClaimRuns(ctx, client.ClaimRequest{WorkerId: "w"}, client.KeyOptions{})
	require.NoError(t, err)
	require.Len(t, runs, 1)
	require.NotNil(t, runs[0].Conf)
	require.Equal(t, want, exactJSON(t, *runs[0].Conf), "claim")

	manual, err := c.Raw.CreateDagRunWithResponse(ctx, "sdk_exact", nil, client.DagRunCreate{LogicalDate: day(2, 1), Conf: &conf})
	require.NoError(t, err)
	require.NotNil(t, manual.JSON201, "body: %s", manual.Body)
	require.Equal(t, want, exactJSON(t, *manual.JSON201.Conf), "manual run")

	// No conf is nil, not the bytes "null".
	plain, err := c.Raw.CreateDagRunWithResponse(ctx, "sdk_exact", nil, client.DagRunCreate{LogicalDate: day(2, 2)})
	require.NoError(t, err)
	require.NotNil(t, plain.JSON201, "body: %s", plain.Body)
	require.Nil(t, plain.JSON201.Conf)
}

func TestCLISendsConfExactly(t *testing.T) {
	t.Parallel()
	bin := buildCLI(t)
	e := newEnv(t)
	e.PutDag("cli_exact", "@daily", "")
	want := jsonbOf(t, e, sdkConf)

	out := okCLI(t, bin, e, "backfills", "create", "-o", "json", "--dag-id", "cli_exact",
		"--from-date", "2024-01-01", "--to-date", "2024-01-02", "--dag-run-conf", sdkConf)
	id, err := confField(t, []byte(out), "id").(json.Number).Int64()
	require.NoError(t, err)
	require.Equal(t, want, storedConf(t, e, id), "the CLI sent the conf exactly")
	require.Equal(t, want, confField(t, []byte(out), "dag_run_conf"), "and prints it exactly")
}
