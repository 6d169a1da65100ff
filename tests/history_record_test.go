package tests

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"
)

// The recording half of the history checker: every HTTP exchange of every client, retries
// included, with its Idempotency-Key, its bodies and its times, as the client saw it.

// exchange is one request and its answer (or transport error).
type exchange struct {
	Client   string
	Method   string
	Path     string
	Key      string
	ReqBody  []byte
	Status   int // 0 when the round trip failed
	Replayed bool
	RespBody []byte
	Err      string
	Start    time.Time
	End      time.Time
}

// ok reports a 2xx answer.
func (x exchange) ok() bool { return x.Status >= 200 && x.Status < 300 }

// unknown reports an answer that says nothing of whether the change happened: a 503 or no
// answer at all, other than the client's own giving up (an executor stops heartbeating a run
// whose work ended by canceling the heartbeat's context).
func (x exchange) unknown() bool {
	return (x.Status == 0 && !strings.Contains(x.Err, "context canceled")) || x.Status == http.StatusServiceUnavailable
}

// recorder keeps the history of every client.
type recorder struct {
	mu  sync.Mutex
	all []exchange
}

func (r *recorder) add(x exchange) {
	r.mu.Lock()
	r.all = append(r.all, x)
	r.mu.Unlock()
}

// history returns a copy of the exchanges recorded so far, in the order they ended.
func (r *recorder) history() []exchange {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]exchange(nil), r.all...)
}

// client returns an HTTP client for one named client of the history, whose every round
// trip over next is recorded.
func (r *recorder) client(name string, next http.RoundTripper) *http.Client {
	return &http.Client{Transport: recordingTransport{rec: r, name: name, next: next}, Timeout: 30 * time.Second}
}

type recordingTransport struct {
	rec  *recorder
	name string
	next http.RoundTripper
}

func (rt recordingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	x := exchange{Client: rt.name, Method: req.Method, Path: req.URL.Path, Key: req.Header.Get("Idempotency-Key")}
	if req.Body != nil {
		body, err := io.ReadAll(req.Body)
		_ = req.Body.Close()
		if err != nil {
			return nil, err
		}
		x.ReqBody = body
		req.Body = io.NopCloser(bytes.NewReader(body))
	}
	x.Start = time.Now()
	resp, err := rt.next.RoundTrip(req)
	if err != nil {
		x.End, x.Err = time.Now(), err.Error()
		rt.rec.add(x)
		return nil, err
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	x.End = time.Now()
	if err != nil {
		x.Err = err.Error()
		rt.rec.add(x)
		return nil, err
	}
	x.Status, x.RespBody = resp.StatusCode, body
	x.Replayed = resp.Header.Get("Idempotent-Replayed") == "true"
	rt.rec.add(x)
	resp.Body = io.NopCloser(bytes.NewReader(body))
	return resp, nil
}

// execution is one call of an executor's work function: the run, the worker, and when.
type execution struct {
	RunID   int64
	Worker  string
	Attempt int
	Start   time.Time
	End     time.Time
	Failed  bool
}

// executions records the work functions' calls.
type executions struct {
	mu  sync.Mutex
	all []execution
}

func (e *executions) add(x execution) {
	e.mu.Lock()
	e.all = append(e.all, x)
	e.mu.Unlock()
}
