package handlers

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/backfillsvc/backfill/api"
)

func fieldErr(field, message string) api.FieldError {
	return api.FieldError{Field: field, Message: message}
}

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
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	err = dec.Decode(v)
	if err == nil {
		if _, extra := dec.Token(); extra != io.EOF {
			err = errors.New("unexpected data after the JSON object")
		}
	}
	if err == nil {
		if field, ok := findNUL(data); ok {
			p := badRequest("strings cannot contain the NUL character", fieldErr(field, "contains the NUL character (\\u0000)"))
			return &p
		}
		return nil
	}
	field, msg := "body", "is not valid JSON"
	var typeErr *json.UnmarshalTypeError
	var timeErr *time.ParseError
	switch {
	case errors.As(err, &typeErr):
		field, msg = typeErr.Field, fmt.Sprintf("must be %s", typeErr.Type)
	case errors.As(err, &timeErr):
		msg = "contains a timestamp that is not a valid RFC 3339 date-time"
	case strings.HasPrefix(err.Error(), "json: unknown field"):
		msg = err.Error()
	case errors.Is(err, io.EOF):
		msg = "is empty"
	}
	p := badRequest("the request body is invalid: "+msg, fieldErr(field, msg))
	return &p
}

// writeJSON answers with a JSON body.
func (s *Server) writeJSON(w http.ResponseWriter, r *http.Request, status int, v any) {
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(v); err != nil {
		s.writeError(w, r, fmt.Errorf("encode answer: %w", err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes()) // the client hung up; nothing to do
}

// page returns limit and offset with the contract's defaults.
func page(limit, offset *int) (int, int) {
	l, o := 50, 0
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
