//go:build ha

package ha

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"sync"
	"time"
)

// record is one request and its answer (or its transport error), as the client saw them.
type record struct {
	Start, End time.Time
	Method     string
	Path       string
	Key        string // Idempotency-Key sent, if any
	Status     int    // 0 on a transport error
	RetryAfter bool
	Code       string // problem code of an error answer
	Err        string
	Body       []byte // the answer of a successful write
}

func (r record) write() bool {
	return r.Method == http.MethodPost || r.Method == http.MethodPut || r.Method == http.MethodPatch
}

func (r record) ok() bool { return r.Status >= 200 && r.Status < 300 }

// bad reports an answer the contract forbids under a failover: any 5xx but a 503 with
// Retry-After, or no answer at all.
func (r record) bad() bool {
	if r.Status == 0 {
		return true
	}
	return r.Status >= 500 && !(r.Status == http.StatusServiceUnavailable && r.RetryAfter)
}

// recorder is an http.RoundTripper that keeps every exchange, the SDK's included.
type recorder struct {
	base http.RoundTripper
	mu   sync.Mutex
	recs []record
}

func (rt *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	rec := record{Start: time.Now(), Method: req.Method, Path: req.URL.Path, Key: req.Header.Get("Idempotency-Key")}
	resp, err := rt.base.RoundTrip(req)
	if err != nil {
		rec.End, rec.Err = time.Now(), err.Error()
		rt.add(rec)
		return nil, err
	}
	body, rerr := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	rec.End, rec.Status = time.Now(), resp.StatusCode
	if rerr != nil {
		rec.Status, rec.Err = 0, rerr.Error()
	}
	rec.RetryAfter = resp.Header.Get("Retry-After") != ""
	if resp.StatusCode >= 400 {
		var p struct {
			Code string `json:"code"`
		}
		_ = json.Unmarshal(body, &p)
		rec.Code = p.Code
	} else if rec.write() {
		rec.Body = body
	}
	rt.add(rec)
	return resp, nil
}

func (rt *recorder) add(r record) {
	rt.mu.Lock()
	rt.recs = append(rt.recs, r)
	rt.mu.Unlock()
}

func (rt *recorder) all() []record {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return append([]record(nil), rt.recs...)
}
