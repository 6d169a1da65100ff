package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// ProblemError is a non-2xx answer of the service: its RFC 9457 problem+json body, or, for
// an answer that is not one (a proxy's error page, say), the status with Code empty and the
// start of the body as Detail. Every helper of Client returns it for a non-2xx answer.
type ProblemError struct {
	// Status is the HTTP status code.
	Status int
	// Code is the service's stable code (backfill_already_running, dag_not_found, ...).
	Code ProblemCode
	// Title is the problem type's short summary.
	Title string
	// Detail explains this occurrence.
	Detail string
	// Errors names each offending field of a 400 invalid_request.
	Errors []FieldError
	// ActiveBackfillID is the DAG's active backfill, with backfill_already_running.
	ActiveBackfillID *int64
	// RetryAfter is the server's Retry-After (busy, unavailable), zero when absent.
	RetryAfter time.Duration
}

// Error reads like "backfill_already_running (409): the DAG already has an active backfill".
func (e *ProblemError) Error() string {
	var b strings.Builder
	if e.Code != "" {
		b.WriteString(string(e.Code))
	} else {
		b.WriteString(http.StatusText(e.Status))
	}
	fmt.Fprintf(&b, " (%d)", e.Status)
	if e.Detail != "" {
		b.WriteString(": ")
		b.WriteString(e.Detail)
	}
	if e.ActiveBackfillID != nil {
		fmt.Fprintf(&b, " (active backfill %d)", *e.ActiveBackfillID)
	}
	for _, f := range e.Errors {
		// The service's detail usually is these field errors in a sentence already
		// ("max_active_runs must be at least 1"): say each thing once.
		if strings.Contains(e.Detail, f.Message) {
			continue
		}
		fmt.Fprintf(&b, "; %s: %s", f.Field, f.Message)
	}
	return b.String()
}

// Temporary reports whether the same request may succeed later unchanged: 503 busy or
// unavailable, and other 5xx answers that did not come from the service (a restarting
// proxy, say).
func (e *ProblemError) Temporary() bool {
	return e.Status == http.StatusServiceUnavailable || e.Status == http.StatusBadGateway ||
		e.Status == http.StatusGatewayTimeout
}

// IsCode reports whether err is, or wraps, a *ProblemError with this code.
func IsCode(err error, code ProblemCode) bool {
	var p *ProblemError
	return errors.As(err, &p) && p.Code == code
}

// maxDetail is how much of a body that is not problem+json ends up in Detail.
const maxDetail = 200

// problemFrom builds the *ProblemError of a non-2xx answer.
func problemFrom(resp *http.Response, body []byte) *ProblemError {
	e := &ProblemError{Status: resp.StatusCode}
	if s := resp.Header.Get("Retry-After"); s != "" {
		if n, err := strconv.Atoi(s); err == nil && n >= 0 {
			e.RetryAfter = time.Duration(n) * time.Second
		}
	}
	var p Problem
	if strings.Contains(resp.Header.Get("Content-Type"), "json") && json.Unmarshal(body, &p) == nil && p.Code != "" {
		e.Code = p.Code
		e.Title = p.Title
		e.Detail = p.Detail
		e.ActiveBackfillID = p.ActiveBackfillId
		if p.Errors != nil {
			e.Errors = *p.Errors
		}
		return e
	}
	e.Title = http.StatusText(resp.StatusCode)
	detail := strings.TrimSpace(string(body))
	if len(detail) > maxDetail {
		detail = strings.ToValidUTF8(detail[:maxDetail], "") + "..."
	}
	e.Detail = detail
	return e
}
