package main

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
)

// serveReadyz answers /readyz with status on a loopback port and returns HTTP_ADDR for it.
func serveReadyz(t *testing.T, status int) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(status)
		_, _ = w.Write([]byte(http.StatusText(status)))
	}))
	t.Cleanup(srv.Close)
	_, port, err := net.SplitHostPort(srv.Listener.Addr().String())
	require.NoError(t, err)
	return ":" + port
}

func TestHealthcheckPassesWhenReadyzAnswers200(t *testing.T) {
	addr := serveReadyz(t, http.StatusOK)
	var out bytes.Buffer
	err := run(context.Background(), []string{"healthcheck"}, getenvFrom(map[string]string{"HTTP_ADDR": addr}), &out)
	require.NoError(t, err)
	require.Contains(t, out.String(), "ready")
}

func TestHealthcheckFailsWhenReadyzAnswers503(t *testing.T) {
	addr := serveReadyz(t, http.StatusServiceUnavailable)
	err := run(context.Background(), []string{"healthcheck"}, getenvFrom(map[string]string{"HTTP_ADDR": addr}), &bytes.Buffer{})
	require.ErrorContains(t, err, "503")
}

func TestHealthcheckFailsWhenNothingListens(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	_, port, _ := net.SplitHostPort(l.Addr().String())
	require.NoError(t, l.Close())
	err = run(context.Background(), []string{"healthcheck"}, getenvFrom(map[string]string{"HTTP_ADDR": ":" + port}), &bytes.Buffer{})
	require.Error(t, err)
}

func getenvFrom(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}
