package handlers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"mime"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

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
	router   routers.Router
	routes   specRoutes // the router's answers, found without it (validate_route.go)
	idRoutes idRoutes
	defaults specDefaults
}

func newSpecValidator() (*specValidator, error) {
	doc, err := openapi3.NewLoader().LoadFromData(api.SpecYAML)
	if err != nil {
		return nil, fmt.Errorf("load openapi spec: %w", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		return nil, fmt.Errorf("openapi spec is invalid: %w", err)
	}
	defaults, err := loadDefaults(doc)
	if err != nil {
		return nil, err
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
	return &specValidator{router: router, routes: newSpecRoutes(doc), idRoutes: newIDRoutes(doc), defaults: defaults}, nil
}

func (v *specValidator) middleware(next http.Handler) http.Handler {
	opts := &openapi3filter.Options{
		MultiError: true,
		// Defaults come from the same spec, read once at start (defaults.go): filling them in
		// here would re-encode every body, and the handlers work on typed values anyway.
		SkipSettingDefaults: true,
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if v.idRoutes.match(r) { // valid by construction (validate_fast.go)
			next.ServeHTTP(w, r)
			return
		}
		route, pathParams := v.routes.find(r)
		var err error
		if route == nil {
			route, pathParams, err = v.router.FindRoute(r)
		}
		switch {
		case errors.Is(err, routers.ErrMethodNotAllowed):
			// RFC 9110 §15.5.6: a 405 names the methods the route does take.
			w.Header().Set("Allow", v.allowed(r))
			writeProblem(w, problem(http.StatusMethodNotAllowed, "method_not_allowed", "this route does not take "+r.Method))
			return
		case err != nil:
			writeProblem(w, problem(http.StatusNotFound, "not_found", "no such route"))
			return
		}
		if p := checkParamText(pathParams, r.URL.Query()); p != nil {
			writeProblem(w, *p)
			return
		}
		if p := checkPathIDs(route, pathParams); p != nil {
			writeProblem(w, *p)
			return
		}
		if p := checkContentType(r, route.Operation); p != nil {
			writeProblem(w, *p)
			return
		}
		in := &openapi3filter.RequestValidationInput{Request: r, PathParams: pathParams, Route: route, Options: opts}
		if err := openapi3filter.ValidateRequest(r.Context(), in); err != nil {
			body := bodyOf(r)
			// A repeated key can be what failed the schema (its last value wins there): name
			// the repetition, the cause, rather than the value's type.
			if p := strictJSON(body); p != nil {
				writeProblem(w, *p)
				return
			}
			fields := fieldErrors(err, body)
			writeProblem(w, badRequest(summarize(fields), fields...))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// checkContentType answers a body sent as anything but a media type the operation declares
// (application/json everywhere) with what to send instead. kin-openapi would say only that the
// header "has unexpected value", and curl's -d sends a form Content-Type by default, which
// left people reading about form encoding. An empty body is left to the validator, which says
// that the body is required.
func checkContentType(r *http.Request, op *openapi3.Operation) *api.Problem {
	if op == nil || op.RequestBody == nil || op.RequestBody.Value == nil || r.ContentLength == 0 {
		return nil
	}
	content := op.RequestBody.Value.Content
	sent := r.Header.Get("Content-Type")
	if mediaType, _, err := mime.ParseMediaType(sent); err == nil && content[strings.ToLower(mediaType)] != nil {
		return nil
	}
	want := slices.Sorted(maps.Keys(content))
	got := "no Content-Type"
	if sent != "" {
		got = "Content-Type " + strconv.Quote(sent)
	}
	msg := fmt.Sprintf("must be %s: send the body as JSON with the header Content-Type: %s (this request has %s)",
		strings.Join(want, " or "), want[0], got)
	p := badRequest("Content-Type "+msg, fieldErr("Content-Type", msg))
	return &p
}

// bodyOf returns the request body that the validator read; kin-openapi leaves a GetBody
// behind for it. Only an error message needs it, to turn a byte offset into a line and column.
func bodyOf(r *http.Request) []byte {
	if r.GetBody == nil {
		return nil
	}
	rc, err := r.GetBody()
	if err != nil {
		return nil
	}
	defer rc.Close()
	data, _ := io.ReadAll(rc) // a bytes.Reader: cannot fail
	return data
}

// fieldErrors flattens kin-openapi's nested errors into one entry per offending field. body is
// the request body, for the position of a JSON syntax error. Every branch matches a type, never
// an error's text.
func fieldErrors(err error, body []byte) []api.FieldError {
	var out []api.FieldError
	seen := map[api.FieldError]bool{}
	add := func(f api.FieldError) {
		if !seen[f] {
			seen[f] = true
			out = append(out, f)
		}
	}
	var walk func(err error, field string, param *openapi3.Parameter)
	walk = func(err error, field string, param *openapi3.Parameter) {
		// A type switch, not errors.As: a RequestError unwraps to the MultiError inside it,
		// and matching that first would lose which part of the request was wrong.
		switch e := err.(type) {
		case openapi3.MultiError:
			for _, inner := range e {
				walk(inner, field, param)
			}
		case *openapi3filter.RequestError:
			switch {
			case e.Parameter != nil:
				field, param = e.Parameter.Name, e.Parameter
			case e.RequestBody != nil:
				field = "body"
			}
			switch {
			case errors.Is(e.Err, openapi3filter.ErrInvalidRequired):
				add(fieldErr(field, "is required: send a JSON object"))
			case e.Err == nil:
				add(fieldErr(field, e.Reason))
			default:
				walk(e.Err, field, param)
			}
		case *openapi3.SchemaError:
			for _, f := range schemaErrors(e, field) {
				add(f)
			}
		case *openapi3filter.ParseError:
			add(fieldErr(field, parseMessage(e, body, param)))
		default:
			if inner := errors.Unwrap(err); inner != nil {
				walk(inner, field, param)
				return
			}
			add(fieldErr(field, err.Error()))
		}
	}
	walk(err, "request", nil)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Field < out[j].Field })
	return out
}

// dateTimeMessage is the whole answer to a timestamp that is not RFC 3339: the format's regular
// expression, which kin-openapi quotes, helps nobody.
const dateTimeMessage = "must be an RFC 3339 date-time such as 2024-03-01T00:00:00Z"

// schemaErrors says what a schema rule wants, as a predicate of the field ("must be at most
// 1000"), from the rule kin-openapi names in SchemaField and the schema's own values.
func schemaErrors(e *openapi3.SchemaError, field string) []api.FieldError {
	if ptr := e.JSONPointer(); len(ptr) > 0 && field == "body" {
		field = strings.Join(ptr, ".")
	}
	s := e.Schema
	if s == nil {
		return []api.FieldError{fieldErr(field, e.Reason)}
	}
	msg := e.Reason
	switch e.SchemaField {
	case "type":
		msg = "must be " + typeName(s)
	case "format":
		msg = "must be a valid " + s.Format
		if s.Format == "date-time" {
			msg = dateTimeMessage
			// A date that parses but does not exist (February 30th) says which part is wrong.
			var pe *time.ParseError
			if errors.As(e.Origin, &pe) && pe.Message != "" {
				msg += " (" + strings.TrimPrefix(pe.Message, ": ") + ")"
			}
		}
	case "minimum", "exclusiveMinimum":
		if s.Min != nil {
			msg = fmt.Sprintf("must be at least %v", *s.Min)
		}
	case "maximum", "exclusiveMaximum":
		if s.Max != nil {
			msg = fmt.Sprintf("must be at most %v", *s.Max)
		}
	case "minLength":
		msg = fmt.Sprintf("must be at least %d characters long", s.MinLength)
		if s.MinLength == 1 {
			msg = "must not be empty"
		}
	case "maxLength":
		if s.MaxLength != nil {
			msg = fmt.Sprintf("must be at most %d characters long", *s.MaxLength)
		}
	case "pattern":
		msg = "must match " + s.Pattern
	case "enum":
		vals := make([]string, len(s.Enum))
		for i, v := range s.Enum {
			vals[i] = fmt.Sprint(v)
		}
		msg = "must be one of " + strings.Join(vals, ", ")
	case "nullable":
		msg = "must not be null"
	case "required":
		msg = "is required"
	case "properties":
		// One error per unknown key, named like the keys the schema knows.
		obj, _ := e.Value.(map[string]any)
		var out []api.FieldError
		for _, k := range slices.Sorted(maps.Keys(obj)) {
			if _, known := s.Properties[k]; !known {
				name := k
				if field != "body" {
					name = field + "." + k
				}
				out = append(out, fieldErr(name, "is not a field of this request"))
			}
		}
		if len(out) > 0 {
			return out
		}
	}
	return []api.FieldError{fieldErr(field, msg)}
}

func typeName(s *openapi3.Schema) string {
	name := "a value of another type"
	if s.Type != nil && len(s.Type.Slice()) > 0 {
		name = s.Type.Slice()[0]
		if name == "integer" || name == "object" || name == "array" {
			name = "an " + name
		} else {
			name = "a " + name
		}
	}
	if s.Type.Is("integer") && s.Format == "int64" {
		name += " of 64 bits"
	}
	return name
}

// parseMessage says why a body or parameter could not be read at all. For JSON it names the
// line and column of the first error.
func parseMessage(e *openapi3filter.ParseError, body []byte, param *openapi3.Parameter) string {
	var syntax *json.SyntaxError
	var numErr *strconv.NumError
	switch {
	case errors.As(e, &syntax):
		line, col := position(body, syntax.Offset)
		return fmt.Sprintf("is not valid JSON: %s at line %d, column %d", syntax.Error(), line, col)
	case errors.Is(e, io.ErrUnexpectedEOF):
		line, col := position(body, int64(len(body)))
		return fmt.Sprintf("is not valid JSON: it ends at line %d, column %d before the JSON value is complete", line, col)
	case param != nil && param.Schema != nil && param.Schema.Value != nil:
		msg := "must be " + typeName(param.Schema.Value)
		if errors.As(e, &numErr) && errors.Is(numErr.Err, strconv.ErrRange) {
			msg += " in range"
		}
		return msg
	case e.Reason != "":
		return "cannot be parsed: " + e.Reason
	}
	return "cannot be parsed: " + e.Error()
}

// position turns a byte offset of body into a 1-based line and column (in bytes).
func position(body []byte, offset int64) (line, col int) {
	offset = min(max(offset, 0), int64(len(body)))
	before := body[:offset]
	line = bytes.Count(before, []byte("\n")) + 1
	col = len(before) - (bytes.LastIndexByte(before, '\n') + 1) + 1
	return line, col
}

// summarize is a problem's detail: each field with what it must be, one sentence per field,
// e.g. "from_date must be an RFC 3339 date-time such as 2024-03-01T00:00:00Z".
func summarize(fields []api.FieldError) string {
	if len(fields) == 0 {
		return "the request does not match the API specification"
	}
	parts := make([]string, 0, len(fields))
	for _, f := range fields {
		parts = append(parts, f.Field+" "+f.Message)
	}
	return strings.Join(parts, "; ")
}

// specMethods are the methods the spec's operations use, in the order Allow lists them.
var specMethods = []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}

// allowed is the Allow header of a 405: the methods whose route the spec has for r's path.
// Only a refused request pays for the look-ups.
func (v *specValidator) allowed(r *http.Request) string {
	var methods []string
	for _, m := range specMethods {
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, _, err := v.router.FindRoute(probe); err == nil {
			methods = append(methods, m)
		}
	}
	return strings.Join(methods, ", ")
}
