package tests

// Every answer a test reads is checked against api/openapi.yaml: those of e.Do, and those the
// typed Go SDK receives through specTransport.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/backfillsvc/backfill/api"
	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
)

func init() {
	// The operations routes' bodies are documents, `type: string` in the spec. kin-openapi has
	// no decoder for text/html or text/javascript, and decodes application/yaml into an object
	// that then fails `type: string`; read all three as the strings they are, so that e.Do's
	// check of every answer against the spec applies to them too.
	// text/event-stream: a backfill's event stream, read whole once it has ended.
	for _, ct := range []string{"text/html", "text/javascript", "text/css", "application/yaml", "text/event-stream"} {
		openapi3filter.RegisterBodyDecoder(ct, openapi3filter.FileBodyDecoder)
	}
}

// specRouter matches real responses against api/openapi.yaml; built once.
var specRouter = sync.OnceValue(func() routers.Router {
	doc, err := openapi3.NewLoader().LoadFromData(api.SpecYAML)
	if err != nil {
		panic(err)
	}
	doc.Servers = openapi3.Servers{{URL: "/"}}
	r, err := gorillamux.NewRouter(doc)
	if err != nil {
		panic(err)
	}
	return r
})

// specError is a response that the spec does not describe.
type specError struct{ msg string }

func (e *specError) Error() string { return e.msg }

// checkAgainstSpec validates a response with kin-openapi. Paths outside the spec must answer
// problem+json 404/405.
func checkAgainstSpec(req *http.Request, payload []byte, res *response) error {
	valReq := req.Clone(context.Background())
	valReq.Body = io.NopCloser(bytes.NewReader(payload))
	route, params, err := specRouter().FindRoute(valReq)
	if err != nil {
		if (res.Status == http.StatusNotFound || res.Status == http.StatusMethodNotAllowed) &&
			res.Header.Get("Content-Type") == "application/problem+json" {
			return nil
		}
		return &specError{"no route in the spec for " + req.Method + " " + req.URL.Path + " but answered " + http.StatusText(res.Status)}
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{
			Request: valReq, PathParams: params, Route: route,
			Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc},
		},
		Status: res.Status,
		Header: res.Header,
		Body:   io.NopCloser(bytes.NewReader(res.Body)),
		Options: &openapi3filter.Options{
			IncludeResponseStatus: true,
			MultiError:            true,
		},
	}
	if strings.HasPrefix(res.Header.Get("Content-Type"), "text/plain") {
		in.Options.ExcludeResponseBody = true
	}
	if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
		return &specError{req.Method + " " + req.URL.Path + " answered " + http.StatusText(res.Status) +
			" outside the spec: " + err.Error() + "\nbody: " + string(res.Body)}
	}
	return nil
}

// specTransport checks every answer that passes through it against the spec, as e.Do does,
// for clients that send their own requests (the Go SDK). A violation fails the call and the
// test: the SDK's executor retries failed calls, so the error alone could go unseen. Event
// streams pass unchecked: they end only when the backfill does.
type specTransport struct {
	t    testing.TB
	base http.RoundTripper
}

func (s specTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	var payload []byte
	if req.Body != nil {
		var err error
		payload, err = io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, err
		}
		// A RoundTripper must not change the caller's request: send a copy with the bytes read.
		req = req.Clone(req.Context())
		req.Body = io.NopCloser(bytes.NewReader(payload))
	}
	res, err := s.base.RoundTrip(req)
	if err != nil || strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream") {
		return res, err
	}
	body, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil {
		return nil, err
	}
	res.Body = io.NopCloser(bytes.NewReader(body))
	if err := checkAgainstSpec(req, payload, &response{Status: res.StatusCode, Header: res.Header, Body: body}); err != nil {
		s.t.Errorf("Go SDK: %v", err)
		return nil, fmt.Errorf("spec check: %w", err)
	}
	return res, nil
}

// specHTTP is the env's HTTP client with every answer checked against the spec.
func (e *env) specHTTP(t testing.TB) *http.Client {
	return &http.Client{Transport: specTransport{t: t, base: e.HTTP.Transport}}
}
