package tests

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/url"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/api"
	"github.com/stretchr/testify/require"
)

// The black-box test sends thousands of generated malformed requests across every route: each
// is a valid request with one or two things broken (a required field dropped, a wrong type, a
// number out of range, a bad timestamp or enum, an unknown field, truncated JSON, a huge string
// or body, a bad id or query parameter, a wrong content type, invalid UTF-8, a wrong method),
// or a well-formed one the service must refuse (unknown DAG, active backfill, inverted window,
// wrong worker). Every one must be answered 4xx problem+json as the spec describes it, never
// 5xx or a dropped connection, and none may write anything: the database is fingerprinted
// (row count, highest id and a hash of every row of every table) before, during and after.

// bbKind is a field's type, which decides how it can be broken.
type bbKind int

const (
	bbString bbKind = iota
	bbInt
	bbBool
	bbDate
	bbEnum
	bbConf
	bbDagID
)

type bbField struct {
	name     string
	kind     bbKind
	valid    string // raw JSON
	required bool
	nullable bool
	lo, hi   int // integer range, or string length range
}

// bbTemplate is a valid request of a body route.
type bbTemplate struct {
	name, method, path string
	fields             []bbField
	// semantic are well-formed bodies (as field overrides) the service must refuse with 4xx.
	semantic []map[string]string
	// semanticPaths are well-formed paths (same body) the service must refuse.
	semanticPaths []string
}

type bbRequest struct {
	kind, route, method, path string
	body                      []byte // nil: no body
	headers                   []string
}

type bbKV struct{ k, v string }

func bbRender(kvs []bbKV) []byte {
	var b strings.Builder
	b.WriteByte('{')
	for i, kv := range kvs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`"` + kv.k + `":` + kv.v)
	}
	b.WriteByte('}')
	return []byte(b.String())
}

func bbQuote(s string) string {
	raw, _ := json.Marshal(s)
	return string(raw)
}

func (tp bbTemplate) kvs() []bbKV {
	out := make([]bbKV, len(tp.fields))
	for i, f := range tp.fields {
		out[i] = bbKV{f.name, f.valid}
	}
	return out
}

var (
	bbBadDates = []string{`"2024-13-01T00:00:00Z"`, `"2024-02-30T00:00:00Z"`, `"2024-01-01"`, `"2024-01-01T00:00:00"`,
		`"yesterday"`, `""`, `"2024-01-01T25:00:00Z"`, `"2024-01-01T00:61:00Z"`, `"2024-01-01T00:00:00+25:00"`,
		`"+002024-01-01T00:00:00Z"`, `"2024-W01"`, `"0000-00-00T00:00:00Z"`, `"2024-1-1T00:00:00Z"`, `"2024-01-01T00:00:00ZZ"`,
		`"2024-01-01Z"`, `"20240101T000000Z"`, `"2024-01-01T00:00:00.Z"`, `"١٢٣٤-01-01T00:00:00Z"`, "\"2024-01-01T00:00:00\xffZ\""}
	bbBadDagIDs = []string{`""`, `"bad id"`, `"bad!"`, `"` + strings.Repeat("d", 251) + `"`, `"daǵ"`, `"a/b"`,
		`"a\u0000b"`, `"d\nx"`, `"über"`, "\"bb_fr\xffee\"", `"*"`, `"bb_free "`}
	bbWrongTypes = map[bbKind][]string{
		bbString: {`123`, `true`, `[]`, `{}`, `["x"]`, `1.5`},
		bbInt:    {`"5"`, `true`, `[]`, `{}`, `2.5`, `"ten"`, `1e400`, `-0.5`},
		bbBool:   {`"true"`, `1`, `0`, `[]`, `"false"`, `{}`},
		bbDate:   {`1704067200`, `true`, `[]`, `{}`, `1.5`},
		bbEnum:   {`1`, `true`, `[]`, `["success"]`, `{}`},
		bbConf:   {`[]`, `[1]`, `"x"`, `1`, `true`, `"{}"`},
		bbDagID:  {`1`, `[]`, `{}`, `true`, `["bb_free"]`},
	}
	bbContentTypes = []string{"text/plain", "application/xml", "application/x-www-form-urlencoded",
		"multipart/form-data; boundary=x", "application/jsonx", "json", "", "text/json", "application/octet-stream"}
	bbBadIDs     = []string{"0", "-1", "abc", "1.5", "9223372036854775808", "1e3", "0x1f", "%20", "1%00", "99999999", "-0", "1,2", "%FF"}
	bbBadPathDag = []string{"bad%20id", "bad!", strings.Repeat("d", 251), "%FF", "a%2Fb", "ghost_dag", "%00", "d%0Ax"}
)

// bbMutateBody breaks a valid body in one way and returns the kind, body and headers.
func bbMutateBody(rng *rand.Rand, tp bbTemplate) (string, []byte, []string) {
	kvs := tp.kvs()
	pickField := func(pred func(bbField) bool) (int, bool) {
		var idx []int
		for i, f := range tp.fields {
			if pred(f) {
				idx = append(idx, i)
			}
		}
		if len(idx) == 0 {
			return 0, false
		}
		return idx[rng.IntN(len(idx))], true
	}
	set := func(i int, raw string) []byte { kvs[i].v = raw; return bbRender(kvs) }
	for {
		switch rng.IntN(16) {
		case 0:
			if i, ok := pickField(func(f bbField) bool { return f.required }); ok {
				return "drop required: " + tp.fields[i].name, bbRender(append(kvs[:i:i], kvs[i+1:]...)), nil
			}
		case 1:
			i := rng.IntN(len(tp.fields))
			f := tp.fields[i]
			pool := bbWrongTypes[f.kind]
			if !f.nullable {
				pool = append(pool[:len(pool):len(pool)], `null`)
			}
			return "wrong type: " + f.name, set(i, pool[rng.IntN(len(pool))]), nil
		case 2:
			if i, ok := pickField(func(f bbField) bool { return f.kind == bbInt }); ok {
				f := tp.fields[i]
				vals := []int{f.lo - 1, f.hi + 1, f.lo - 1000, f.hi * 1000, -2147483649, 2147483648}
				return "out of range: " + f.name, set(i, fmt.Sprint(vals[rng.IntN(len(vals))])), nil
			}
		case 3:
			if i, ok := pickField(func(f bbField) bool { return f.kind == bbString && f.hi > 0 }); ok {
				f := tp.fields[i]
				n := f.hi + 1 + rng.IntN(100)
				if f.lo > 0 && rng.IntN(3) == 0 {
					n = f.lo - 1
				}
				return "string length: " + f.name, set(i, bbQuote(strings.Repeat("x", n))), nil
			}
		case 4:
			if i, ok := pickField(func(f bbField) bool { return f.kind == bbDate }); ok {
				return "bad timestamp: " + tp.fields[i].name, set(i, bbBadDates[rng.IntN(len(bbBadDates))]), nil
			}
		case 5:
			if i, ok := pickField(func(f bbField) bool { return f.kind == bbEnum }); ok {
				bad := []string{`"done"`, `"SUCCESS"`, `" success"`, `""`, `"succeeded"`, `"all"`, `"none "`, `"Failed"`, "\"succ\xffess\""}
				return "bad enum: " + tp.fields[i].name, set(i, bad[rng.IntN(len(bad))]), nil
			}
		case 6:
			if i, ok := pickField(func(f bbField) bool { return f.kind == bbDagID }); ok {
				return "bad dag_id in body", set(i, bbBadDagIDs[rng.IntN(len(bbBadDagIDs))]), nil
			}
		case 7:
			extra := []bbKV{{"foo", `1`}, {"dag_run_id", `"x"`}, {"id", `5`}, {"state", `"running"`}, {"DAG_ID", `"bb_free"`}, {"", `1`}}
			return "unknown field", bbRender(append(kvs, extra[rng.IntN(len(extra))])), nil
		case 8:
			full := bbRender(kvs)
			return "truncated JSON", full[:rng.IntN(len(full)-1)], nil
		case 9:
			bodies := []string{`[]`, `[` + string(bbRender(kvs)) + `]`, `"x"`, `1`, `null`, `true`, ``, ` `, `{}`, `{"a":}`, `{'a':1}`, `{"a":1,}`}
			b := bodies[rng.IntN(len(bodies))]
			if b == `{}` && len(tp.requiredNames()) == 0 {
				continue
			}
			return "not an object", []byte(b), nil
		case 10:
			tails := []string{` {}`, ` x`, `]`, `,{}`, `{"a":1}`, "\x00"}
			return "trailing data", append(bbRender(kvs), tails[rng.IntN(len(tails))]...), nil
		case 11:
			return "content type", bbRender(kvs), []string{"Content-Type", bbContentTypes[rng.IntN(len(bbContentTypes))]}
		case 12:
			full := bbRender(kvs)
			pos := 1 + rng.IntN(len(full)-1)
			// Outside a string value when the byte lands between tokens; inside a
			// constrained value (dag_id, date, enum) it still breaks it. Free-text values are
			// skipped: replacement characters are legal there.
			if bbInsideFreeText(tp, full, pos) {
				continue
			}
			return "invalid UTF-8", append(append(append([]byte{}, full[:pos]...), 0xff, 0xfe), full[pos:]...), nil
		case 13:
			if rng.IntN(4) == 0 {
				// Over 1 MiB: 413.
				pad := strings.Repeat("x", 1<<20)
				return "body over 1 MiB", bbRender(append(kvs, bbKV{"pad", bbQuote(pad)})), nil
			}
			if i, ok := pickField(func(f bbField) bool { return f.kind == bbString || f.kind == bbDagID }); ok {
				f := tp.fields[i]
				limit := f.hi
				if f.kind == bbDagID {
					limit = 250
				}
				return "huge string: " + f.name, set(i, bbQuote(strings.Repeat("é", limit+1+rng.IntN(5000)))), nil
			}
		case 14:
			if len(tp.semantic) > 0 {
				over := tp.semantic[rng.IntN(len(tp.semantic))]
				for i := range kvs {
					if v, ok := over[kvs[i].k]; ok {
						kvs[i].v = v
					}
				}
				return "well-formed but refused (404/409/422)", bbRender(kvs), nil
			}
		case 15:
			if tp.name == "create backfill" {
				keys := []string{strings.Repeat("k", 256), "ключ", "tab\tkey", "", "é"}
				return "bad Idempotency-Key", bbRender(kvs), []string{"Idempotency-Key", keys[rng.IntN(len(keys))]}
			}
		}
	}
}

func (tp bbTemplate) requiredNames() []string {
	var out []string
	for _, f := range tp.fields {
		if f.required {
			out = append(out, f.name)
		}
	}
	return out
}

// bbInsideFreeText reports whether pos falls inside the value of a free-text field.
func bbInsideFreeText(tp bbTemplate, body []byte, pos int) bool {
	for _, f := range tp.fields {
		if f.kind != bbString && f.kind != bbConf {
			continue
		}
		key := []byte(`"` + f.name + `":`)
		at := strings.Index(string(body), string(key))
		if at < 0 {
			continue
		}
		start := at + len(key)
		end := start + len(f.valid)
		if pos >= at && pos <= end {
			return true
		}
	}
	return false
}

// bbFixture is what the requests are aimed at.
type bbFixture struct {
	backfillID int64
	claimed    api.DagRun // running under bb_w
}

func bbTemplates(fx bbFixture) []bbTemplate {
	bfFields := func() []bbField {
		return []bbField{
			{name: "dag_id", kind: bbDagID, valid: `"bb_free"`, required: true},
			{name: "from_date", kind: bbDate, valid: `"2024-01-01T00:00:00Z"`, required: true},
			{name: "to_date", kind: bbDate, valid: `"2024-01-05T00:00:00Z"`, required: true},
			{name: "run_backwards", kind: bbBool, valid: `true`},
			{name: "dag_run_conf", kind: bbConf, valid: `{"a":1}`, nullable: true},
			{name: "reprocess_behavior", kind: bbEnum, valid: `"failed"`},
			{name: "max_active_runs", kind: bbInt, valid: `3`, lo: 1, hi: 1000},
			{name: "description", kind: bbString, valid: `"d"`, nullable: true, hi: 10000},
		}
	}
	bfSemantic := []map[string]string{
		{"dag_id": `"bb_ghost"`},
		{"dag_id": `"bb_daily"`}, // has an active backfill: 409
		{"from_date": `"2024-02-01T00:00:00Z"`, "to_date": `"2024-01-01T00:00:00Z"`},
		{"from_date": `"2099-01-01T00:00:00Z"`, "to_date": `"2099-02-01T00:00:00Z"`},
		{"from_date": `"2024-01-01T06:00:00Z"`, "to_date": `"2024-01-01T07:00:00Z"`},
	}
	runPath := "/api/v1/dags/bb_daily/runs/" + url.PathEscape(fx.claimed.RunId)
	return []bbTemplate{
		{name: "put dag", method: "PUT", path: "/api/v1/dags/bb_new", fields: []bbField{
			{name: "schedule", kind: bbString, valid: `"@daily"`, required: true, lo: 1, hi: 200},
			{name: "timezone", kind: bbString, valid: `"UTC"`, lo: 1, hi: 100},
			{name: "max_active_runs", kind: bbInt, valid: `5`, lo: 1, hi: 1000},
			{name: "is_paused", kind: bbBool, valid: `false`},
			{name: "description", kind: bbString, valid: `"d"`, nullable: true, hi: 10000},
		}, semantic: []map[string]string{
			{"schedule": `"@every 1h"`}, {"schedule": `"61 * * * *"`}, {"schedule": `"* * *"`},
			{"schedule": `"@reboot"`}, {"timezone": `"Mars/Olympus_Mons"`}, {"timezone": `"utc+1"`},
		}},
		{name: "create run", method: "POST", path: "/api/v1/dags/bb_hourly/runs", fields: []bbField{
			{name: "logical_date", kind: bbDate, valid: `"2024-03-01T00:00:00Z"`, required: true},
			{name: "conf", kind: bbConf, valid: `{"a":1}`, nullable: true},
		}, semantic: []map[string]string{{"logical_date": `"2024-02-01T00:00:00Z"`}}, // exists: 409
			semanticPaths: []string{"/api/v1/dags/bb_ghost/runs"}},
		{name: "patch run", method: "PATCH", path: runPath, fields: []bbField{
			{name: "state", kind: bbEnum, valid: `"success"`, required: true},
			{name: "worker_id", kind: bbString, valid: `"bb_w"`, lo: 1, hi: 255},
		}, semantic: []map[string]string{{"state": `"running"`}, {"state": `"queued"`}, {"worker_id": `"someone_else"`}},
			semanticPaths: []string{"/api/v1/dags/bb_daily/runs/backfill__2023-01-01T00:00:00Z", "/api/v1/dags/bb_ghost/runs/" + url.PathEscape(fx.claimed.RunId)}},
		{name: "create backfill", method: "POST", path: "/api/v1/backfills", fields: bfFields(), semantic: bfSemantic},
		{name: "dry run", method: "POST", path: "/api/v1/backfills/dry_run", fields: bfFields(), semantic: bfSemantic[:1]},
		{name: "claim", method: "POST", path: "/api/v1/runs/claim", fields: []bbField{
			{name: "worker_id", kind: bbString, valid: `"bb_w2"`, required: true, lo: 1, hi: 255},
			{name: "limit", kind: bbInt, valid: `2`, lo: 1, hi: 100},
			{name: "lease_seconds", kind: bbInt, valid: `60`, lo: 10, hi: 3600},
			{name: "dag_id", kind: bbDagID, valid: `"bb_daily"`},
		}},
		{name: "heartbeat", method: "POST", path: fmt.Sprintf("/api/v1/runs/%d/heartbeat", fx.claimed.Id), fields: []bbField{
			{name: "worker_id", kind: bbString, valid: `"bb_w"`, required: true, lo: 1, hi: 255},
		}, semantic: []map[string]string{{"worker_id": `"someone_else"`}},
			semanticPaths: []string{"/api/v1/runs/99999999/heartbeat"}},
	}
}

// bbQueryRoute is a GET route with query parameters, each of which can be broken.
type bbQueryRoute struct {
	path   string
	params map[string][]string // name -> bad values
}

var bbQueryRoutes = []bbQueryRoute{
	{"/api/v1/dags", map[string][]string{"limit": {"0", "1001", "-1", "abc", "1.5", "1e3", ""}, "offset": {"-1", "abc", "1.5", "9223372036854775808"}}},
	{"/api/v1/dags/bb_daily/runs", map[string][]string{"state": {"done", "RUNNING", "", "succeeded"}, "backfill_id": {"0", "abc", "-5", "1.0"},
		"limit": {"0", "1001"}, "offset": {"-1", "x"}}},
	{"/api/v1/backfills", map[string][]string{"dag_id": {"bad id", strings.Repeat("d", 251), "%FF", ""}, "state": {"done", "RUNNING", "success"},
		"active": {"maybe", "yes", "2", ""}, "order_by": {"name", "+id", "id,-id", ""}, "limit": {"0", "1001"}, "offset": {"-1"}}},
	{"/api/v1/backfills/%d/dag_runs", map[string][]string{"order_by": {"logical_date", "sort_ordinal desc", ""}, "limit": {"0", "1001", "x"}, "offset": {"-1", "y"}}},
}

// bbGenerate produces n malformed requests from a deterministic generator.
func bbGenerate(seed uint64, n int, fx bbFixture) []bbRequest {
	rng := rand.New(rand.NewPCG(seed, 1))
	templates := bbTemplates(fx)
	id := fmt.Sprint(fx.backfillID)
	out := make([]bbRequest, 0, n)
	for len(out) < n {
		switch r := rng.IntN(20); {
		case r < 11: // a body route
			tp := templates[rng.IntN(len(templates))]
			path := tp.path
			if len(tp.semanticPaths) > 0 && rng.IntN(10) == 0 {
				out = append(out, bbRequest{"well-formed but refused (unknown DAG or run)", tp.name, tp.method, tp.semanticPaths[rng.IntN(len(tp.semanticPaths))], bbRender(tp.kvs()), nil})
				continue
			}
			kind, body, headers := bbMutateBody(rng, tp)
			out = append(out, bbRequest{kind, tp.name, tp.method, path, body, headers})
		case r < 14: // bad ids in paths
			bad := bbBadIDs[rng.IntN(len(bbBadIDs))]
			routes := []struct{ method, path, body string }{
				{"GET", "/api/v1/backfills/" + bad, ""},
				{"GET", "/api/v1/backfills/" + bad + "/dag_runs", ""},
				{"PUT", "/api/v1/backfills/" + bad + "/pause", ""},
				{"PUT", "/api/v1/backfills/" + bad + "/unpause", ""},
				{"PUT", "/api/v1/backfills/" + bad + "/cancel", ""},
				{"POST", "/api/v1/runs/" + bad + "/heartbeat", `{"worker_id":"bb_w"}`},
			}
			rt := routes[rng.IntN(len(routes))]
			var body []byte
			if rt.body != "" {
				body = []byte(rt.body)
			}
			out = append(out, bbRequest{"bad id in path: " + bad, rt.method + " id route", rt.method, rt.path, body, nil})
		case r < 16: // bad dag ids and run ids in paths
			bad := bbBadPathDag[rng.IntN(len(bbBadPathDag))]
			longRun := strings.Repeat("r", 301)
			routes := []struct{ method, path, body string }{
				{"GET", "/api/v1/dags/" + bad, ""},
				{"PUT", "/api/v1/dags/" + bad, `{"schedule":"@daily"}`},
				{"GET", "/api/v1/dags/" + bad + "/runs", ""},
				{"POST", "/api/v1/dags/" + bad + "/runs", `{"logical_date":"2024-03-01T00:00:00Z"}`},
				{"GET", "/api/v1/dags/" + bad + "/runs/manual__2024-02-01T00:00:00Z", ""},
				{"PATCH", "/api/v1/dags/" + bad + "/runs/" + url.PathEscape(fx.claimed.RunId), `{"state":"success","worker_id":"bb_w"}`},
				{"GET", "/api/v1/dags/bb_daily/runs/" + longRun, ""},
				{"PATCH", "/api/v1/dags/bb_daily/runs/" + longRun, `{"state":"success"}`},
			}
			rt := routes[rng.IntN(len(routes))]
			if bad == "ghost_dag" && rt.method == "PUT" {
				continue // a valid new DAG
			}
			var body []byte
			if rt.body != "" {
				body = []byte(rt.body)
			}
			out = append(out, bbRequest{"bad dag_id or run_id in path: " + bad[:min(len(bad), 12)], rt.method + " dag route", rt.method, rt.path, body, nil})
		case r < 19: // bad query parameters
			qr := bbQueryRoutes[rng.IntN(len(bbQueryRoutes))]
			path := qr.path
			if strings.Contains(path, "%d") {
				path = fmt.Sprintf(path, fx.backfillID)
			}
			names := make([]string, 0, len(qr.params))
			for k := range qr.params {
				names = append(names, k)
			}
			sort.Strings(names)
			name := names[rng.IntN(len(names))]
			bad := qr.params[name][rng.IntN(len(qr.params[name]))]
			if bad == "" && name != "limit" {
				// An empty value counts as absent for some parameters: not malformed.
				bad = "%00"
			}
			q := name + "=" + url.QueryEscape(bad)
			if strings.HasPrefix(bad, "%") {
				q = name + "=" + bad
			}
			if bad == "" {
				q = name + "="
			}
			out = append(out, bbRequest{"bad query parameter: " + name, "GET " + qr.path, "GET", path + "?" + q, nil, nil})
		default: // methods no route takes
			routes := []struct{ method, path string }{
				{"POST", "/api/v1/dags/bb_daily"}, {"POST", "/api/v1/dags"}, {"DELETE", "/api/v1/backfills/" + id},
				{"PUT", "/api/v1/backfills/" + id}, {"POST", "/api/v1/backfills/" + id + "/pause"}, {"GET", "/api/v1/runs/claim"},
				{"PUT", "/api/v1/runs/claim"}, {"GET", "/api/v1/backfills/dry_run"}, {"DELETE", "/api/v1/dags/bb_daily/runs/x"},
				{"POST", "/api/v1/nowhere"}, {"GET", "/api/v2/dags"}, {"POST", "/api/v1/backfills/" + id + "/dag_runs"},
			}
			rt := routes[rng.IntN(len(routes))]
			out = append(out, bbRequest{"wrong method or route", rt.method + " " + rt.path, rt.method, rt.path, []byte(`{}`), nil})
		}
	}
	return out
}

// bbFingerprint is the row count, highest id and a hash of the rows of every table.
func bbFingerprint(t testing.TB, e *env) map[string]string {
	t.Helper()
	tables := e.publicTables()
	out := map[string]string{}
	for _, tbl := range tables {
		var n int
		var hash string
		require.NoError(t, e.DB.QueryRow(fmt.Sprintf(
			`SELECT count(*), coalesce(md5(string_agg(md5(t::text), '' ORDER BY md5(t::text))), '') FROM %q t`, tbl)).Scan(&n, &hash))
		out[tbl] = fmt.Sprintf("%d rows %s", n, hash)
	}
	for _, tbl := range []string{"backfills", "dag_runs"} {
		var maxID int64
		require.NoError(t, e.DB.Get(&maxID, fmt.Sprintf(`SELECT coalesce(max(id), 0) FROM %s`, tbl)))
		out[tbl+" max id"] = fmt.Sprint(maxID)
	}
	return out
}

func TestBlackBoxMalformedRequests(t *testing.T) {
	t.Parallel()
	const (
		total   = 6000
		workers = 4
		seed    = 20240101
	)
	e := newEnv(t)
	// The fixture: a DAG with an active backfill and a claimed run, a DAG with a manual run,
	// and a free DAG that a valid creation would succeed on.
	e.PutDag("bb_daily", "@daily", "")
	e.PutDag("bb_hourly", "@hourly", "Europe/Amsterdam")
	e.PutDag("bb_free", "@daily", "")
	b := e.CreateBackfill(backfillBody("bb_daily", day(1, 1), day(1, 10), "max_active_runs", 3))
	e.CreateManualRun("bb_hourly", day(2, 1), nil)
	claimed := e.ClaimWithN(2, map[string]any{"worker_id": "bb_w", "limit": 2, "dag_id": "bb_daily"})
	fx := bbFixture{backfillID: b.Id, claimed: claimed[0]}

	reqs := bbGenerate(seed, total, fx)
	before := bbFingerprint(t, e)

	var (
		mu       sync.Mutex
		fails    []string
		nFails   int
		byStatus = map[int]int{}
		byKind   = map[string]int{}
		byRoute  = map[string]int{}
	)
	fail := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		nFails++
		if len(fails) < 30 {
			fails = append(fails, fmt.Sprintf(format, args...))
		}
	}
	start := time.Now()
	const batch = 500
	for from := 0; from < len(reqs); from += batch {
		chunk := reqs[from:min(from+batch, len(reqs))]
		var wg sync.WaitGroup
		next := make(chan bbRequest)
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for r := range next {
					var body any
					if r.body != nil {
						body = r.body
					}
					res, err := e.do(r.method, r.path, body, r.headers...)
					desc := fmt.Sprintf("%s [%s] %s %s body %q", r.route, r.kind, r.method, bbShort(r.path), bbShort(string(r.body)))
					if err != nil {
						if res == nil {
							fail("%s: transport error: %v", desc, err)
						} else {
							fail("%s: %v", desc, err)
						}
						continue
					}
					mu.Lock()
					byStatus[res.Status]++
					byKind[strings.SplitN(r.kind, ":", 2)[0]]++
					byRoute[r.route]++
					mu.Unlock()
					switch {
					case res.Status >= 500:
						fail("%s: answered %d: %s", desc, res.Status, res.Body)
					case res.Status < 400:
						fail("%s: a malformed request was accepted (%d): %s", desc, res.Status, bbShort(string(res.Body)))
					case res.Header.Get("Content-Type") != "application/problem+json":
						fail("%s: %d without problem+json", desc, res.Status)
					}
				}
			}()
		}
		for _, r := range chunk {
			next <- r
		}
		close(next)
		wg.Wait()
		if now := bbFingerprint(t, e); !mapsEqual(now, before) {
			t.Fatalf("requests %d..%d wrote to the database:\nbefore %v\nafter  %v", from, from+len(chunk)-1, before, now)
		}
	}
	took := time.Since(start)
	require.Equal(t, before, bbFingerprint(t, e), "rejected requests wrote to the database")
	require.Zero(t, nFails, "%d of %d malformed requests failed:\n%s", nFails, len(reqs), strings.Join(fails, "\n"))

	// The fixture was never blocked: a valid request still goes through.
	e.CreateBackfill(backfillBody("bb_free", day(1, 1), day(1, 5)))

	t.Logf("%d malformed requests (seed %d) in %s: %s", len(reqs), seed, took.Round(time.Millisecond), bbHistogram(byStatus))
	t.Logf("by route: %s", bbHistogram(byRoute))
	t.Logf("by mutation: %s", bbHistogram(byKind))
}

func bbShort(s string) string {
	if len(s) > 160 {
		return s[:160] + fmt.Sprintf("...(%d bytes)", len(s))
	}
	return s
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func bbHistogram[K comparable](m map[K]int) string {
	type kv struct {
		k K
		n int
	}
	var all []kv
	for k, n := range m {
		all = append(all, kv{k, n})
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].n != all[j].n {
			return all[i].n > all[j].n
		}
		return fmt.Sprint(all[i].k) < fmt.Sprint(all[j].k)
	})
	parts := make([]string, len(all))
	for i, x := range all {
		parts[i] = fmt.Sprintf("%v: %d", x.k, x.n)
	}
	return strings.Join(parts, ", ")
}

// Requests that the spec allows but that carry hostile content: NUL characters and lone
// surrogates in free text, deep and huge configurations, extreme numbers in conf. None may
// answer 5xx; each is either refused (and writes nothing) or accepted (and stored).
func TestBlackBoxHostileButWellFormedRequests(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.PutDag("hb", "@daily", "")
	deep := strings.Repeat(`{"a":`, 200) + `1` + strings.Repeat(`}`, 200)
	type tc struct{ name, method, path, body string }
	cases := []tc{
		{"NUL in DAG description", "PUT", "/api/v1/dags/hb_nul", `{"schedule":"@daily","description":"a\u0000b"}`},
		{"NUL in schedule", "PUT", "/api/v1/dags/hb_nul2", `{"schedule":"@daily\u0000"}`},
		{"NUL in timezone", "PUT", "/api/v1/dags/hb_nul3", `{"schedule":"@daily","timezone":"UTC\u0000"}`},
		{"lone surrogate in description", "PUT", "/api/v1/dags/hb_sur", `{"schedule":"@daily","description":"\ud800"}`},
		{"NUL in conf value", "POST", "/api/v1/dags/hb/runs", `{"logical_date":"2024-01-01T00:00:00Z","conf":{"k":"a\u0000b"}}`},
		{"NUL in conf key", "POST", "/api/v1/dags/hb/runs", `{"logical_date":"2024-01-02T00:00:00Z","conf":{"a\u0000":1}}`},
		{"huge number in conf", "POST", "/api/v1/dags/hb/runs", `{"logical_date":"2024-01-03T00:00:00Z","conf":{"n":1e400}}`},
		{"deep conf", "POST", "/api/v1/dags/hb/runs", `{"logical_date":"2024-01-04T00:00:00Z","conf":` + deep + `}`},
		{"NUL in backfill description", "POST", "/api/v1/backfills", `{"dag_id":"hb","from_date":"2024-02-01T00:00:00Z","to_date":"2024-02-02T00:00:00Z","description":"\u0000"}`},
		{"NUL in dag_run_conf", "POST", "/api/v1/backfills", `{"dag_id":"hb","from_date":"2024-02-01T00:00:00Z","to_date":"2024-02-02T00:00:00Z","dag_run_conf":{"x":"\u0000"}}`},
		{"NUL in worker_id", "POST", "/api/v1/runs/claim", `{"worker_id":"w\u0000"}`},
		{"year 0001", "POST", "/api/v1/dags/hb/runs", `{"logical_date":"0001-01-01T00:00:00Z"}`},
		{"year 9999", "POST", "/api/v1/dags/hb/runs", `{"logical_date":"9999-12-31T23:59:59Z"}`},
		{"offset +23:59", "POST", "/api/v1/dags/hb/runs", `{"logical_date":"2024-01-05T00:00:00+23:59"}`},
		{"nanoseconds", "POST", "/api/v1/dags/hb/runs", `{"logical_date":"2024-01-06T00:00:00.123456789Z"}`},
		{"window from year 1", "POST", "/api/v1/backfills/dry_run", `{"dag_id":"hb","from_date":"0001-01-01T00:00:00Z","to_date":"0001-01-03T00:00:00Z"}`},
		{"window of 8000 years", "POST", "/api/v1/backfills/dry_run", `{"dag_id":"hb","from_date":"0001-01-01T00:00:00Z","to_date":"8000-01-01T00:00:00Z"}`},
		{"backfill id +1", "PUT", "/api/v1/backfills/+1/pause", ``},
	}
	var outcomes []string
	for _, c := range cases {
		before := bbFingerprint(t, e)
		var body any
		if c.body != "" {
			body = c.body
		}
		res, err := e.do(c.method, c.path, body)
		require.NotNil(t, res, "%s: %v", c.name, err)
		require.NoError(t, err, c.name)
		if res.Status >= 500 {
			t.Errorf("%s: %s %s answered %d: %s", c.name, c.method, c.path, res.Status, res.Body)
		}
		if res.Status >= 400 {
			if after := bbFingerprint(t, e); !mapsEqual(before, after) {
				t.Errorf("%s was refused (%d) but wrote:\nbefore %v\nafter  %v", c.name, res.Status, before, after)
			}
		}
		outcomes = append(outcomes, fmt.Sprintf("%s: %d", c.name, res.Status))
	}
	t.Logf("%s", strings.Join(outcomes, "; "))
}
