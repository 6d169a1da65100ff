package handlers

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"net/http"
	"os"
	"strconv"
	"strings"

	"github.com/go-chi/chi/v5/middleware"
)

// requestID gives every request an id and returns it in the X-Request-Id answer header, so
// that a client can quote it and an operator find the request's log lines: the client's
// X-Request-Id when it sent one, else one of chi's form ("host/random-000042") from chi's own
// counter, kept under chi's context key, so middleware.GetReqID reads it as before. It is
// chi's RequestID and the echo in one step, built without fmt: formatting the id with Sprintf
// cost more than the rest of both.
func requestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var id string
		if v := r.Header[middleware.RequestIDHeader]; len(v) > 0 { // Header.Get, without canonicalising a canonical key
			id = v[0]
		}
		if id == "" {
			id = nextRequestID()
		}
		w.Header()[middleware.RequestIDHeader] = []string{id}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), middleware.RequestIDKey, id)))
	})
}

// requestIDPrefix is "hostname/" and ten random base64 characters, as chi makes its prefix.
var requestIDPrefix = func() string {
	host, err := os.Hostname()
	if host == "" || err != nil {
		host = "localhost"
	}
	var b64 string
	for len(b64) < 10 {
		var buf [12]byte
		_, _ = rand.Read(buf[:]) // never fails (crypto/rand)
		b64 = strings.NewReplacer("+", "", "/", "").Replace(base64.StdEncoding.EncodeToString(buf[:]))
	}
	return host + "/" + b64[:10]
}()

// nextRequestID is chi's "%s-%06d" of the prefix and the next count.
func nextRequestID() string {
	var buf [96]byte
	b := append(buf[:0], requestIDPrefix...)
	b = append(b, '-')
	var digits [20]byte
	d := strconv.AppendUint(digits[:0], middleware.NextRequestID(), 10)
	for i := len(d); i < 6; i++ {
		b = append(b, '0')
	}
	return string(append(b, d...))
}
