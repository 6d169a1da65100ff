package handlers

import (
	"encoding/json"
	"fmt"

	"github.com/backfillsvc/backfill/api"
	"github.com/backfillsvc/backfill/domain"
	"github.com/getkin/kin-openapi/openapi3"
)

// specDefaults are the values api/openapi.yaml declares for what a request leaves out. They
// are read from the loaded spec once at start, so the spec is their one source: a handler
// never repeats a number the contract already states. Reading them here was simpler than
// kin-openapi's default filling (Options.SkipSettingDefaults false), which re-encodes every
// JSON body after validation (and cannot reach the typed query parameters the generated
// binder reads); a default missing from the spec fails the start instead of becoming zero.
type specDefaults struct {
	limit, offset         int
	backfillOrderBy       api.ListBackfillsParamsOrderBy
	slotOrderBy           api.ListBackfillDagRunsParamsOrderBy
	backfillMaxActiveRuns int
	backfillRunBackwards  bool
	reprocessBehavior     domain.ReprocessBehavior
	dagTimezone           string
	dagMaxActiveRuns      int
	dagIsPaused           bool
	dagDependsOnPast      bool
	upstreamMapping       domain.DependencyMapping
	upstreamLookback      int
	claimLimit            int
	leaseSeconds          int
}

func loadDefaults(doc *openapi3.T) (specDefaults, error) {
	r := defaultReader{doc: doc}
	d := specDefaults{
		limit:                 r.int(r.param("Limit")),
		offset:                r.int(r.param("Offset")),
		backfillOrderBy:       api.ListBackfillsParamsOrderBy(r.str(r.opParam("listBackfills", "order_by"))),
		slotOrderBy:           api.ListBackfillDagRunsParamsOrderBy(r.str(r.opParam("listBackfillDagRuns", "order_by"))),
		backfillMaxActiveRuns: r.int(r.prop("BackfillCreate", "max_active_runs")),
		backfillRunBackwards:  r.bool(r.prop("BackfillCreate", "run_backwards")),
		reprocessBehavior:     domain.ReprocessBehavior(r.str(r.prop("BackfillCreate", "reprocess_behavior"))),
		dagTimezone:           r.str(r.prop("DagPut", "timezone")),
		dagMaxActiveRuns:      r.int(r.prop("DagPut", "max_active_runs")),
		dagIsPaused:           r.bool(r.prop("DagPut", "is_paused")),
		dagDependsOnPast:      r.bool(r.prop("DagPut", "depends_on_past")),
		upstreamMapping:       domain.DependencyMapping(r.str(r.prop("DagUpstreamPut", "mapping"))),
		upstreamLookback:      r.int(r.prop("DagUpstreamPut", "lookback")),
		claimLimit:            r.int(r.prop("ClaimRequest", "limit")),
		leaseSeconds:          r.int(r.prop("ClaimRequest", "lease_seconds")),
	}
	return d, r.err
}

// defaultReader reads schema defaults, keeping the first error.
type defaultReader struct {
	doc *openapi3.T
	err error
}

func (r *defaultReader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("openapi default: "+format, args...)
	}
}

// named is one default and where it came from, for the error message.
type named struct {
	where string
	value any
}

func (r *defaultReader) schemaDefault(where string, s *openapi3.SchemaRef) named {
	if s == nil || s.Value == nil || s.Value.Default == nil {
		r.fail("%s declares no default", where)
		return named{where: where}
	}
	return named{where, s.Value.Default}
}

func (r *defaultReader) param(name string) named {
	p := r.doc.Components.Parameters[name]
	if p == nil || p.Value == nil {
		r.fail("no parameter %s", name)
		return named{where: name}
	}
	return r.schemaDefault("parameter "+name, p.Value.Schema)
}

func (r *defaultReader) opParam(opID, name string) named {
	for _, item := range r.doc.Paths.Map() {
		for _, op := range item.Operations() {
			if op.OperationID != opID {
				continue
			}
			if p := op.Parameters.GetByInAndName("query", name); p != nil {
				return r.schemaDefault(opID+" "+name, p.Schema)
			}
		}
	}
	r.fail("no query parameter %s of %s", name, opID)
	return named{where: opID + " " + name}
}

func (r *defaultReader) prop(schema, name string) named {
	s := r.doc.Components.Schemas[schema]
	if s == nil || s.Value == nil || s.Value.Properties[name] == nil {
		r.fail("no property %s.%s", schema, name)
		return named{where: schema + "." + name}
	}
	return r.schemaDefault(schema+"."+name, s.Value.Properties[name])
}

func (r *defaultReader) int(n named) int {
	switch v := n.value.(type) {
	case float64:
		if v == float64(int(v)) {
			return int(v)
		}
	case int:
		return v
	case int64:
		return int(v)
	case json.Number:
		if i, err := v.Int64(); err == nil {
			return int(i)
		}
	case nil:
		return 0 // already failed
	}
	r.fail("%s: default %v is not an integer", n.where, n.value)
	return 0
}

func (r *defaultReader) str(n named) string {
	s, ok := n.value.(string)
	if !ok && n.value != nil {
		r.fail("%s: default %v is not a string", n.where, n.value)
	}
	return s
}

func (r *defaultReader) bool(n named) bool {
	b, ok := n.value.(bool)
	if !ok && n.value != nil {
		r.fail("%s: default %v is not a boolean", n.where, n.value)
	}
	return b
}
