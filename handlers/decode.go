package handlers

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"sort"
	"strings"
	"time"

	"github.com/backfillsvc/backfill/api"
)

func fieldErr(field, message string) api.FieldError {
	return api.FieldError{Field: field, Message: message}
}

// errTrailingData is a body with more after its JSON object.
var errTrailingData = errors.New("has data after the JSON object")

// decodeBody reads the JSON object of a request into v. The spec validator has already
// checked shape, types and ranges; this decode is strict too (unknown fields, trailing data),
// and catches what a regexp cannot, such as a 30th of February. Numbers in free-form objects
// stay json.Number so that conf round-trips without float rounding.
func decodeBody(r *http.Request, v any) *api.Problem {
	data, err := io.ReadAll(r.Body)
	if err != nil {
		p := badRequest("the request body could not be read", fieldErr("body", "could not be read"))
		return &p
	}
	if p := strictJSON(data); p != nil {
		return p
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	err = dec.Decode(v)
	if err == nil {
		if _, extra := dec.Token(); extra != io.EOF {
			err = errTrailingData
		}
	}
	if err == nil {
		if p := checkText(data); p != nil {
			return p
		}
		if field, ok := findNUL(data); ok {
			p := badRequest(field+" must not contain the NUL character", fieldErr(field, "must not contain the NUL character (\\u0000)"))
			return &p
		}
		return nil
	}
	field, msg := decodeError(err, data, dec.InputOffset())
	p := badRequest(field+" "+msg, fieldErr(field, msg))
	return &p
}

// decodeError names the field and what is wrong with it, from the decoder's typed errors only:
// what a person can act on is where the body breaks (line and column) or which field has the
// wrong type. offset is where the decoder stopped.
func decodeError(err error, data []byte, offset int64) (field, msg string) {
	var syntaxErr *json.SyntaxError
	var typeErr *json.UnmarshalTypeError
	var timeErr *time.ParseError
	switch {
	case errors.As(err, &typeErr) && typeErr.Field != "":
		return typeErr.Field, "must be " + jsonKind(typeErr.Type)
	case errors.As(err, &timeErr):
		return "body", "contains a timestamp that is not an RFC 3339 date-time such as 2024-03-01T00:00:00Z"
	case errors.As(err, &syntaxErr):
		line, col := position(data, syntaxErr.Offset)
		return "body", fmt.Sprintf("is not valid JSON: %s at line %d, column %d", syntaxErr.Error(), line, col)
	case errors.Is(err, io.ErrUnexpectedEOF):
		line, col := position(data, int64(len(data)))
		return "body", fmt.Sprintf("is not valid JSON: it ends at line %d, column %d before the JSON value is complete", line, col)
	case errors.Is(err, io.EOF):
		return "body", "is empty: send a JSON object"
	case errors.Is(err, errTrailingData):
		line, col := position(data, offset)
		return "body", fmt.Sprintf("%s (at line %d, column %d): send one JSON object", err.Error(), line, col)
	}
	// encoding/json's other errors (an unknown field) have no type of their own; their text
	// names the field and is shown as it is.
	return "body", "is invalid: " + err.Error()
}

// jsonKind names a Go type as the JSON a client should send for it.
func jsonKind(t reflect.Type) string {
	if t == reflect.TypeFor[time.Time]() {
		return "an RFC 3339 date-time such as 2024-03-01T00:00:00Z"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "of another type"
}

// writeJSON answers with a JSON body.
func (s *Server) writeJSON(w http.ResponseWriter, r *http.Request, status int, v any) {
	buf := answerBuffers.Get().(*[]byte)
	defer putAnswerBuffer(buf)
	var err error
	if *buf, err = appendAnswer((*buf)[:0], v); err != nil {
		s.writeError(w, r, fmt.Errorf("encode answer: %w", err))
		return
	}
	w.Header()["Content-Type"] = jsonContentType
	w.WriteHeader(status)
	_, _ = w.Write(*buf) // the client hung up; nothing to do
}

// writePut answers a PUT that creates or replaces a resource: 201 with its location when it
// was created, 200 when it was replaced.
func (s *Server) writePut(w http.ResponseWriter, r *http.Request, created bool, location string, v any) {
	status := http.StatusOK
	if created {
		status = http.StatusCreated
		w.Header().Set("Location", location)
	}
	s.writeJSON(w, r, status, v)
}

// page returns limit and offset with the spec's defaults.
func (s *Server) page(limit, offset *int) (int, int) {
	l, o := s.defaults.limit, s.defaults.offset
	if limit != nil {
		l = *limit
	}
	if offset != nil {
		o = *offset
	}
	return l, o
}

// findNUL reports the first JSON string (or key) of a body that holds U+0000, which
// PostgreSQL text and jsonb cannot store. The common case, a body without the escape, costs one
// scan of the bytes.
func findNUL(data []byte) (string, bool) {
	if !bytes.Contains(data, []byte(`\u0000`)) {
		return "", false
	}
	// UseNumber: into float64, a number like 1e400 would fail the decode and hide the NUL.
	var doc any
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		return "", false
	}
	return nulIn(doc, "body")
}

func nulIn(v any, path string) (string, bool) {
	switch t := v.(type) {
	case string:
		return path, strings.ContainsRune(t, 0)
	case []any:
		for i, e := range t {
			if p, ok := nulIn(e, fmt.Sprintf("%s.%d", path, i)); ok {
				return p, true
			}
		}
	case map[string]any:
		for k, e := range t {
			field := k
			if path != "body" {
				field = path + "." + k
			}
			if strings.ContainsRune(k, 0) {
				return field, true
			}
			if p, ok := nulIn(e, field); ok {
				return p, true
			}
		}
	}
	return "", false
}

// Timestamps the service accepts. Below: nothing is scheduled before 1900, and Go's zero time
// (0001-01-01) must never pass for a real date. Above: a year the answers can still encode
// after a schedule's next tick is added (RFC 3339 ends at 9999), with room to spare.
var (
	minTimestamp = time.Date(1900, 1, 1, 0, 0, 0, 0, time.UTC)
	maxTimestamp = time.Date(9000, 1, 1, 0, 0, 0, 0, time.UTC)
)

// checkTimestamps answers 400 for timestamps outside the supported range, and for digits finer
// than a microsecond: PostgreSQL keeps microseconds and would round the rest, which can move a
// date across a boundary (a to_date of 23:59:59.9999995 became the next midnight and gained a
// slot), so finer digits are refused rather than silently changed. Every timestamp a request
// carries (bodies only: no query parameter is a timestamp) passes here.
func checkTimestamps(fields map[string]time.Time) *api.Problem {
	var errs []api.FieldError
	for name, t := range fields {
		switch {
		case t.Before(minTimestamp) || !t.Before(maxTimestamp):
			errs = append(errs, fieldErr(name, "must be from 1900-01-01 to before 9000-01-01"))
		case t.Nanosecond()%int(time.Microsecond) != 0:
			errs = append(errs, fieldErr(name, "must have at most microsecond precision (6 fractional digits)"))
		}
	}
	if len(errs) == 0 {
		return nil
	}
	sort.Slice(errs, func(i, j int) bool { return errs[i].Field < errs[j].Field })
	p := badRequest(summarize(errs), errs...)
	return &p
}
