package handlers

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
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
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	dec.UseNumber()
	err := dec.Decode(v)
	if err == nil {
		if _, extra := dec.Token(); extra != io.EOF {
			err = errors.New("unexpected data after the JSON object")
		}
	}
	if err == nil {
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
func writeJSON(w http.ResponseWriter, status int, v any) {
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(v); err != nil {
		writeProblem(w, problem(http.StatusInternalServerError, "internal", "internal error"))
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
