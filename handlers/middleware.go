package handlers

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strings"
	"time"

	"github.com/backfillsvc/backfill/tracing"
	"github.com/go-chi/chi/v5/middleware"
)

// MaxBodyBytes is the largest request body accepted (413 above it).
const MaxBodyBytes = 1 << 20

// limitBody reads the body up front, at most MaxBodyBytes, so that an oversized body is a
// clean 413 before validation and handlers see a body they can read twice.
func limitBody(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody {
			next.ServeHTTP(w, r)
			return
		}
		// Only the routes that take a body read one: a body sent with a GET is dropped unread,
		// so that nothing downstream can be made to buffer it.
		if !takesBody(r.Method) {
			r.Body = http.NoBody
			r.ContentLength = 0
			next.ServeHTTP(w, r)
			return
		}
		tooLarge := problem(http.StatusRequestEntityTooLarge, "payload_too_large", "the request body is larger than 1 MiB")
		if r.ContentLength > MaxBodyBytes {
			writeProblem(w, tooLarge)
			return
		}
		body, err := readBody(http.MaxBytesReader(w, r.Body, MaxBodyBytes), r.ContentLength)
		var maxErr *http.MaxBytesError
		switch {
		case errors.As(err, &maxErr):
			writeProblem(w, tooLarge)
			return
		case err != nil:
			writeProblem(w, badRequest("the request body could not be read", fieldErr("body", "could not be read")))
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		next.ServeHTTP(w, r)
	})
}

// readBody reads a body whose length the request declared into a buffer of that size, in
// place of io.ReadAll's growing ones; net/http ends the body at its Content-Length, so reading
// on to EOF still finds one that is cut short.
func readBody(body io.Reader, length int64) ([]byte, error) {
	if length <= 0 || length > MaxBodyBytes {
		return io.ReadAll(body)
	}
	buf := make([]byte, length, length+1)
	if _, err := io.ReadFull(body, buf); err != nil {
		return nil, err
	}
	// Nothing past the declared length (the read also meets a body that says it is longer).
	if n, err := body.Read(buf[length : length+1]); n > 0 || (err != nil && err != io.EOF) {
		if err == nil {
			err = errors.New("body longer than its Content-Length")
		}
		return nil, err
	}
	return buf, nil
}

func takesBody(method string) bool {
	return method == http.MethodPost || method == http.MethodPut || method == http.MethodPatch
}

// requireToken guards /api/v1 with bearer tokens when any are configured. Tokens are compared
// through their SHA-256 digests in constant time, so neither content nor length leaks through
// timing; a list allows rotation.
func requireToken(tokens []string) func(http.Handler) http.Handler {
	digests := make([][32]byte, 0, len(tokens))
	for _, t := range tokens {
		if t = strings.TrimSpace(t); t != "" {
			digests = append(digests, sha256.Sum256([]byte(t)))
		}
	}
	return func(next http.Handler) http.Handler {
		if len(digests) == 0 {
			return next
		}
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !strings.HasPrefix(r.URL.Path, "/api/v1/") && r.URL.Path != "/api/v1" {
				next.ServeHTTP(w, r)
				return
			}
			given, ok := bearerToken(r.Header.Get("Authorization"))
			digest := sha256.Sum256([]byte(given))
			match := 0
			for _, d := range digests {
				match |= subtle.ConstantTimeCompare(digest[:], d[:])
			}
			if !ok || match != 1 {
				w.Header().Set("WWW-Authenticate", `Bearer realm="backfill"`)
				writeProblem(w, problem(http.StatusUnauthorized, "unauthorized", "a valid bearer token is required"))
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

// bearerToken extracts the token of an Authorization header. The scheme name is
// case-insensitive (RFC 9110 section 11.1): "bearer x" and "BEARER x" carry the token x.
func bearerToken(header string) (string, bool) {
	scheme, token, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	return strings.TrimLeft(token, " "), true
}

// recoverer turns a panic into a logged 500 problem instead of a dropped connection.
func (s *Server) recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			rec := recover()
			if rec == nil {
				return
			}
			if rec == http.ErrAbortHandler {
				panic(rec)
			}
			s.log(r).Error("panic", "panic", rec, "stack", string(debug.Stack()))
			writeProblem(w, problem(http.StatusInternalServerError, "internal", "internal error"))
		}()
		next.ServeHTTP(w, r)
	})
}

// accessLog logs one line per request: at debug for health probes and metric scrapes,
// which arrive every few seconds from machines and would drown the rest, at info otherwise.
func (s *Server) accessLog(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
		next.ServeHTTP(ww, r)
		level := slog.LevelInfo
		if isProbe(r.URL.Path) {
			level = slog.LevelDebug
		}
		// The same line as s.log(r).Log(...), handed to the handler as one record: a logger
		// derived per request (With) formats its attributes into a new handler first, and
		// Logger's methods walk the stack for the caller's program counter, which this log
		// does not print (together about 3 % of the service's CPU per status read, pprof).
		h := s.logger.Handler()
		if !h.Enabled(r.Context(), level) {
			return
		}
		rec := slog.NewRecord(time.Now(), level, "request", 0)
		rec.AddAttrs(
			slog.String("request_id", middleware.GetReqID(r.Context())),
			slog.String("method", r.Method), slog.String("path", r.URL.Path),
			slog.Int("status", ww.Status()), slog.Int("bytes", ww.BytesWritten()),
			slog.Float64("duration_ms", float64(time.Since(start).Microseconds())/1000))
		if s.tracer != nil {
			rec.AddAttrs(slog.String("trace_id", tracing.TraceID(r.Context())))
		}
		_ = h.Handle(r.Context(), rec) // a log that cannot be written has nowhere to say so
	})
}

// isProbe tells the paths that machines poll: liveness, readiness and metrics.
func isProbe(path string) bool {
	return path == "/healthz" || path == "/readyz" || path == "/metrics"
}
