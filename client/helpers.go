// Package client is the Go SDK of the backfill service.
//
// client.gen.go is generated from ../api/openapi.yaml by oapi-codegen (models, RawClient and
// ClientWithResponses) and committed; `make lint` regenerates it and fails on a diff. The
// hand-written files around it are a thin layer for the common flows:
//
//	c, err := client.New("http://localhost:8080", os.Getenv("BACKFILL_TOKEN"))
//	b, err := c.CreateBackfill(ctx, client.BackfillCreate{DagId: "sales", FromDate: from, ToDate: to},
//		client.CreateOptions{IdempotencyKey: "march-2024"})
//	b, err = c.WaitBackfill(ctx, b.Id, time.Second, func(b client.Backfill) { fmt.Println(b.Progress) })
//
// and, for an executor, RunExecutor (claim, heartbeat, report). Every helper answers a
// non-2xx response with a *ProblemError, so callers can branch on the service's stable codes
// with errors.As or IsCode. Anything the helpers do not cover is on Client.Raw.
package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// DefaultTimeout bounds each HTTP request of a Client made by New, unless WithTimeout or
// the generated WithHTTPClient says otherwise. Every call of the API is one short
// transaction on the server; waiting is done by polling, never by a long request.
const DefaultTimeout = 30 * time.Second

// maxBodyBytes caps what a helper reads of one answer; the service's largest page (1000
// runs) is far below it.
const maxBodyBytes = 32 << 20

// Client is the backfill service's SDK: typed helpers over the generated client.
// It is safe for concurrent use.
type Client struct {
	// Raw is the generated client, for operations or response details the helpers do not
	// cover. It carries the same HTTP client and bearer token as the helpers.
	Raw *ClientWithResponses
	// Retry is how the creating helpers retry; zero fields take DefaultRetry's. Set it
	// before the Client is shared.
	Retry RetryPolicy
}

// New returns a Client for the service at server, its base URL without the /api/v1 prefix
// (e.g. "http://localhost:8080"). A non-empty token is sent as
// `Authorization: Bearer <token>` on every request. opts are the generated client's
// options: WithHTTPClient (a custom doer), WithRequestEditorFn (e.g. a User-Agent), and
// this package's WithTimeout. Without them requests use an http.Client with DefaultTimeout.
func New(server, token string, opts ...ClientOption) (*Client, error) {
	server = strings.TrimRight(server, "/")
	if server == "" {
		return nil, fmt.Errorf("client: empty server URL")
	}
	all := []ClientOption{
		WithHTTPClient(&http.Client{Timeout: DefaultTimeout}),
		WithRequestEditorFn(func(_ context.Context, req *http.Request) error {
			req.Header.Set("User-Agent", "backfill-go-sdk")
			if token != "" {
				req.Header.Set("Authorization", "Bearer "+token)
			}
			return nil
		}),
	}
	raw, err := NewClientWithResponses(server, append(all, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	return &Client{Raw: raw}, nil
}

// WithTimeout makes New use an http.Client with this per-request timeout.
func WithTimeout(d time.Duration) ClientOption {
	return WithHTTPClient(&http.Client{Timeout: d})
}

// raw is the generated client underneath ClientWithResponses: its methods answer the
// *http.Response, which decode reads the same way for every operation.
func (c *Client) raw() ClientInterface { return c.Raw.ClientInterface }

// decode reads one answer of the service: the JSON body into a T when the status is one of
// want, a *ProblemError for any other status. err is the transport error of the call.
func decode[T any](resp *http.Response, err error, want ...int) (T, *http.Response, error) {
	var v T
	if err != nil {
		return v, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBodyBytes))
	if err != nil {
		return v, resp, fmt.Errorf("client: reading the answer to %s %s: %w", resp.Request.Method, resp.Request.URL.Path, err)
	}
	for _, w := range want {
		if resp.StatusCode != w {
			continue
		}
		if err := json.Unmarshal(body, &v); err != nil {
			return v, resp, fmt.Errorf("client: decoding the answer to %s %s (%d): %w", resp.Request.Method, resp.Request.URL.Path, resp.StatusCode, err)
		}
		return v, resp, nil
	}
	return v, resp, problemFrom(resp, body)
}
