package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/client"
	"github.com/stretchr/testify/require"
)

// invoke runs the program against a server and answers its exit code, stdout and stderr.
func invoke(t *testing.T, server string, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	getenv := func(k string) string {
		if k == "BACKFILL_SERVER" && server != "" {
			return server
		}
		return env[k]
	}
	code := run(context.Background(), args, getenv, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func answer(w http.ResponseWriter, status int, v any) {
	ct := "application/json"
	if _, ok := v.(client.Problem); ok {
		ct = "application/problem+json"
	}
	w.Header().Set("Content-Type", ct)
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func TestParseTakesFlagsAnywhereAndStopsAtDoubleDash(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	n := fs.Int("n", 0, "")
	pos, err := parse(fs, []string{"a", "-n", "3", "b", "--", "-c"})
	require.NoError(t, err)
	require.Equal(t, 3, *n)
	require.Equal(t, []string{"a", "b", "-c"}, pos)
}

func TestFlagValuesParseDatesConfAndOptionalBools(t *testing.T) {
	var d dateValue
	require.NoError(t, d.Set("2024-03-01"))
	require.Equal(t, time.Date(2024, 3, 1, 0, 0, 0, 0, time.UTC), d.t)
	require.NoError(t, d.Set("2024-03-01T02:00:00-05:00"))
	require.Equal(t, time.Date(2024, 3, 1, 7, 0, 0, 0, time.UTC), d.t)
	require.Error(t, d.Set("March 1st"))

	var c confValue
	require.NoError(t, c.Set(`{"a": 1}`))
	require.Equal(t, `{"a":1}`, c.String())
	require.NoError(t, c.Set(` {"n": 9007199254740993, "x": 1e400} `))
	require.Equal(t, `{"n":9007199254740993,"x":1e400}`, c.String(), "digits kept as typed")
	require.Error(t, c.Set(`[1]`))
	require.Error(t, c.Set(`null`))

	var b optBool
	require.Equal(t, "", b.String())
	require.NoError(t, b.Set("false"))
	require.False(t, *b.v)
}

func TestGlobalFlagsComeFromEnvironmentAndFlagsEitherSideOfTheCommand(t *testing.T) {
	var auth atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth.Store(r.Header.Get("Authorization"))
		answer(w, http.StatusOK, client.DagCollection{Dags: []client.Dag{{DagId: "sales", Schedule: "@daily", Timezone: "UTC"}}, TotalEntries: 1})
	}))
	defer srv.Close()

	code, out, _ := invoke(t, "", map[string]string{"BACKFILL_SERVER": srv.URL, "BACKFILL_TOKEN": "from-env"}, "dags", "list")
	require.Equal(t, exitOK, code)
	require.Contains(t, out, "sales")
	require.Equal(t, "Bearer from-env", auth.Load())

	code, out, _ = invoke(t, "", nil, "--server", srv.URL, "dags", "list", "--token", "from-flag", "-o", "json")
	require.Equal(t, exitOK, code)
	require.Equal(t, "Bearer from-flag", auth.Load())
	var l client.DagCollection
	require.NoError(t, json.Unmarshal([]byte(out), &l))
	require.EqualValues(t, 1, l.TotalEntries)
}

func TestProblemsExitThreeWithCodeAndDetailOnStderr(t *testing.T) {
	active := int64(4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		answer(w, http.StatusConflict, client.Problem{Type: "about:blank", Title: "Conflict", Status: 409,
			Code: client.ProblemCodeBackfillAlreadyRunning, Detail: "the DAG already has an active backfill", ActiveBackfillId: &active})
	}))
	defer srv.Close()
	code, out, errOut := invoke(t, srv.URL, nil, "backfills", "create", "--dag-id", "sales", "--from-date", "2024-01-01", "--to-date", "2024-01-31")
	require.Equal(t, exitError, code)
	require.Empty(t, out)
	require.Contains(t, errOut, "backfill_already_running (409): the DAG already has an active backfill (active backfill 4)")
	require.Contains(t, errOut, "backfillctl watch 4")
}

func TestUsageErrorsExitThree(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"frobnicate"},
		{"backfills", "create", "--from-date", "2024-01-01", "--to-date", "2024-01-02"},
		{"backfills", "create", "--dag-id", "x", "--from-date", "yesterday", "--to-date", "2024-01-02"},
		{"backfills", "get", "abc"},
		{"backfills", "list", "--order-by", "name"},
		{"-o", "yaml", "dags", "list"},
	} {
		code, _, errOut := invoke(t, "http://127.0.0.1:1", nil, args...)
		require.Equal(t, exitError, code, "args %q", args)
		require.NotEmpty(t, errOut, "args %q", args)
	}
	code, out, _ := invoke(t, "", nil, "help")
	require.Equal(t, exitOK, code)
	require.Contains(t, out, "Exit codes:")
	code, _, errOut := invoke(t, "", nil, "backfills", "create", "-h")
	require.Equal(t, exitOK, code)
	require.Contains(t, errOut, "--reprocess-behavior")
}

func TestWatchExitCodeFollowsTheFinalState(t *testing.T) {
	for state, want := range map[client.BackfillState]int{
		client.BackfillStateSucceeded: exitOK,
		client.BackfillStateFailed:    exitFailed,
		client.BackfillStateCanceled:  exitCanceled,
	} {
		var polls atomic.Int32
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b := client.Backfill{Id: 1, State: client.BackfillStateRunning, Progress: client.BackfillProgress{Total: 2, Queued: 2}}
			if polls.Add(1) > 2 {
				b.State = state
				b.Progress = client.BackfillProgress{Total: 2, Success: 1, Failed: 1}
			}
			answer(w, http.StatusOK, b)
		}))
		code, out, _ := invoke(t, srv.URL, nil, "watch", "1", "--interval", "1ms")
		srv.Close()
		require.Equal(t, want, code, "state %s", state)
		require.Contains(t, out, "backfill 1 "+string(state)+": 2/2 done")
		require.NotContains(t, out, "\r", "not a terminal")
	}
}

func TestWatchJSONPutsProgressOnStderrAndTheBackfillOnStdout(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		answer(w, http.StatusOK, client.Backfill{Id: 1, State: client.BackfillStateSucceeded, Progress: client.BackfillProgress{Total: 1, Success: 1}})
	}))
	defer srv.Close()
	code, out, errOut := invoke(t, srv.URL, nil, "-o", "json", "watch", "1")
	require.Equal(t, exitOK, code)
	var b client.Backfill
	require.NoError(t, json.Unmarshal([]byte(out), &b))
	require.Equal(t, client.BackfillStateSucceeded, b.State)
	require.True(t, strings.Contains(errOut, "backfill 1 succeeded"), errOut)
}

func TestWatchTimeoutExitsThree(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		answer(w, http.StatusOK, client.Backfill{Id: 1, State: client.BackfillStateRunning})
	}))
	defer srv.Close()
	code, _, errOut := invoke(t, srv.URL, nil, "watch", "1", "--interval", "5ms", "--timeout", "300ms")
	require.Equal(t, exitError, code)
	require.Contains(t, errOut, "gave up watching backfill 1 after 300ms")
}
