package handlers

import (
	"net/url"

	"github.com/backfillsvc/backfill/api"
	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/routers"
)

// checkPathIDs answers 400 for an integer path parameter that is not written as plain decimal
// digits. kin-openapi and the generated binder read `+1`, `01` and ` 1` as 1, so
// /backfills/+1 answered backfill 1: one resource under many URLs, which caches, logs and
// access rules keyed by URL tell apart. An id is written one way, as the service writes it.
func checkPathIDs(route *routers.Route, pathParams map[string]string) *api.Problem {
	var errs []api.FieldError
	check := func(params openapi3.Parameters) {
		for _, ref := range params {
			p := ref.Value
			if p == nil || p.In != openapi3.ParameterInPath || p.Schema == nil || p.Schema.Value == nil ||
				!p.Schema.Value.Type.Is(openapi3.TypeInteger) {
				continue
			}
			v, ok := pathParams[p.Name]
			if !ok {
				continue
			}
			if u, err := url.PathUnescape(v); err == nil {
				v = u
			}
			if !isDecimalKey(v, 64) {
				errs = append(errs, fieldErr(p.Name, "must be an integer in plain decimal digits, without sign, leading zeros or spaces"))
			}
		}
	}
	check(route.PathItem.Parameters)
	if route.Operation != nil {
		check(route.Operation.Parameters)
	}
	if len(errs) == 0 {
		return nil
	}
	p := badRequest(summarize(errs), errs...)
	return &p
}
