package handlers_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/backfillsvc/backfill/handlers"
	"github.com/stretchr/testify/require"
)

// A creation's log line says who made the backfill (X-Actor), why, and with which code.
func TestCreateLogsCreatedByReasonAndCodeRef(t *testing.T) {
	var logs bytes.Buffer
	h, err := handlers.New(handlers.Options{Store: &fakeStore{}, Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	require.NoError(t, err)
	body := `{"dag_id": "d", "from_date": "2024-01-01T00:00:00Z", "to_date": "2024-01-02T00:00:00Z",
		"code_ref": "git:abc", "reason": "DATA-1"}`
	req := httptest.NewRequest(http.MethodPost, "/api/v1/backfills", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Actor", "alice")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	require.Equal(t, http.StatusCreated, rec.Code, rec.Body.String())

	var created map[string]any
	for _, line := range bytes.Split(bytes.TrimSpace(logs.Bytes()), []byte("\n")) {
		var m map[string]any
		require.NoError(t, json.Unmarshal(line, &m))
		if m["msg"] == "backfill created" {
			created = m
		}
	}
	require.NotNil(t, created, logs.String())
	require.Equal(t, "alice", created["created_by"])
	require.Equal(t, "DATA-1", created["reason"])
	require.Equal(t, "git:abc", created["code_ref"])
}
