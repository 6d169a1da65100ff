package handlers

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
)

// idRoutes are the spec's GET routes that a request without a query string can satisfy with
// nothing but positive integer ids in its path: GET /api/v1/backfills/{backfill_id} and the
// like. Clients poll them, and for such a request kin-openapi's route search (a regular
// expression per route) and parameter checks cost about as much as the rest of the request
// path together; the answer is the same as checking the path here, so the validator skips them.
//
// A route qualifies only if every path parameter is an integer with minimum 1 and no maximum,
// and every other parameter is an optional query parameter (absent when there is no query
// string). Anything else, including a request this check refuses, goes through kin-openapi
// as before, so that its 400 and 404 answers stay the spec's.
type idRoutes struct {
	templates [][]string // path segments; "" stands for an id
}

func newIDRoutes(doc *openapi3.T) idRoutes {
	var out idRoutes
	for path, item := range doc.Paths.Map() {
		op := item.Get
		if op == nil || !onlyIDParams(append(item.Parameters, op.Parameters...)) {
			continue
		}
		segs := strings.Split(strings.TrimPrefix(path, "/"), "/")
		for i, s := range segs {
			if strings.HasPrefix(s, "{") {
				segs[i] = ""
			}
		}
		out.templates = append(out.templates, segs)
	}
	return out
}

func onlyIDParams(params openapi3.Parameters) bool {
	ids := 0
	for _, ref := range params {
		p := ref.Value
		if p == nil {
			return false
		}
		switch p.In {
		case openapi3.ParameterInPath:
			s := p.Schema
			if s == nil || s.Value == nil || !s.Value.Type.Is(openapi3.TypeInteger) || s.Value.Min == nil ||
				*s.Value.Min != 1 || s.Value.Max != nil || s.Value.ExclusiveMin.IsSet() || len(s.Value.Enum) > 0 {
				return false
			}
			ids++
		case openapi3.ParameterInQuery:
			if p.Required {
				return false
			}
		default: // headers and cookies are checked by kin-openapi
			return false
		}
	}
	return ids > 0
}

// match reports whether r is a GET without a query string of one of the routes, with every
// id a positive int64 written in plain decimal digits.
func (t idRoutes) match(r *http.Request) bool {
	if r.Method != http.MethodGet || r.URL.RawQuery != "" || r.URL.RawPath != "" || r.URL.ForceQuery {
		return false
	}
	path := strings.TrimPrefix(r.URL.Path, "/")
next:
	for _, segs := range t.templates {
		rest := path
		for i, want := range segs {
			seg, tail, more := strings.Cut(rest, "/")
			if more != (i < len(segs)-1) {
				continue next
			}
			rest = tail
			if want != "" {
				if seg != want {
					continue next
				}
				continue
			}
			if !positiveID(seg) {
				continue next
			}
		}
		return true
	}
	return false
}

func positiveID(s string) bool {
	if s == "" || s[0] < '1' || s[0] > '9' { // no sign, no leading zero
		return false
	}
	for i := 1; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	_, err := strconv.ParseInt(s, 10, 64)
	return err == nil
}
