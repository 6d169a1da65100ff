package handlers

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"

	"github.com/backfillsvc/backfill/api"
	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
)

// specValidator checks every request against api/openapi.yaml before a handler sees it, so
// that the spec's types, ranges, patterns and enums are the one source of the 400 rules.
//
// Numbers: kin-openapi decodes a JSON body with UseNumber and converts a number to float64 only
// where a schema constrains it. A free-form object (a conf: additionalProperties: true) is not
// looked into, so 9007199254740993 or 1e400 there passes untouched to decodeBody, which keeps
// it as json.Number too. Where the spec wants an integer, 1e400 fails that conversion and
// 2^53+1 fails its maximum: 400 either way, never a rounded value.
type specValidator struct {
	router routers.Router
}

func newSpecValidator() (*specValidator, error) {
	doc, err := openapi3.NewLoader().LoadFromData(api.SpecYAML)
	if err != nil {
		return nil, fmt.Errorf("load openapi spec: %w", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		return nil, fmt.Errorf("openapi spec is invalid: %w", err)
	}
	// The spec's servers name a host; match on paths alone, whatever host serves us.
	doc.Servers = openapi3.Servers{{URL: "/"}}
	// Authentication is requireToken's job. Left in, kin-openapi's security check would read
	// (and buffer) every request body a second time for authentication functions we do not use.
	doc.Security = nil
	for _, item := range doc.Paths.Map() {
		for _, op := range item.Operations() {
			op.Security = nil
		}
	}
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		return nil, fmt.Errorf("openapi router: %w", err)
	}
	return &specValidator{router: router}, nil
}

func (v *specValidator) middleware(next http.Handler) http.Handler {
	opts := &openapi3filter.Options{
		MultiError: true,
		// Defaults are filled in by the handlers, on typed values.
		SkipSettingDefaults: true,
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		route, pathParams, err := v.router.FindRoute(r)
		switch {
		case errors.Is(err, routers.ErrMethodNotAllowed):
			writeProblem(w, problem(http.StatusMethodNotAllowed, "method_not_allowed", "this route does not take "+r.Method))
			return
		case err != nil:
			writeProblem(w, problem(http.StatusNotFound, "not_found", "no such route"))
			return
		}
		in := &openapi3filter.RequestValidationInput{Request: r, PathParams: pathParams, Route: route, Options: opts}
		if err := openapi3filter.ValidateRequest(r.Context(), in); err != nil {
			fields := fieldErrors(err)
			writeProblem(w, badRequest(summarize(fields), fields...))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// fieldErrors flattens kin-openapi's nested errors into one entry per offending field.
func fieldErrors(err error) []api.FieldError {
	var out []api.FieldError
	var walk func(err error, field string)
	walk = func(err error, field string) {
		// A type switch, not errors.As: a RequestError unwraps to the MultiError inside it,
		// and matching that first would lose which part of the request was wrong.
		switch e := err.(type) {
		case openapi3.MultiError:
			for _, inner := range e {
				walk(inner, field)
			}
		case *openapi3filter.RequestError:
			switch {
			case e.Parameter != nil:
				field = e.Parameter.Name
			case e.RequestBody != nil:
				field = "body"
			}
			if e.Err == nil {
				out = append(out, api.FieldError{Field: field, Message: e.Reason})
				return
			}
			walk(e.Err, field)
		case *openapi3.SchemaError:
			if ptr := e.JSONPointer(); len(ptr) > 0 && field == "body" {
				field = strings.Join(ptr, ".")
			}
			out = append(out, api.FieldError{Field: field, Message: e.Reason})
		case *openapi3filter.ParseError:
			out = append(out, api.FieldError{Field: field, Message: "cannot be parsed: " + e.Reason})
		default:
			if inner := errors.Unwrap(err); inner != nil {
				walk(inner, field)
				return
			}
			out = append(out, api.FieldError{Field: field, Message: err.Error()})
		}
	}
	walk(err, "request")
	sort.SliceStable(out, func(i, j int) bool { return out[i].Field < out[j].Field })
	return out
}

func summarize(fields []api.FieldError) string {
	if len(fields) == 0 {
		return "the request does not match the API specification"
	}
	parts := make([]string, 0, len(fields))
	for _, f := range fields {
		parts = append(parts, f.Field+": "+f.Message)
	}
	return strings.Join(parts, "; ")
}
