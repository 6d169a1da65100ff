package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"testing"

	"github.com/backfillsvc/backfill/api"
	"github.com/stretchr/testify/require"
)

// Idempotency-Key on the creating POSTs other than POST /backfills: a claim, a webhook, a
// manual run. The key is recorded in the change's transaction; these tests hold what a retry
// with the key answers, and that it changes nothing.

func runIDs(runs []api.DagRun) []int64 {
	ids := make([]int64, len(runs))
	for i, r := range runs {
		ids[i] = r.Id
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}

// A claim sent again with its key claims nothing more: it answers the runs the first claim
// handed out that are still leased to the worker.
func TestClaimIdempotencyKeyAnswersTheRunsStillLeased(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.PutDag("ck", "@daily", "")
	b := e.DailyBackfill("ck", day(1, 1), day(1, 4), "max_active_runs", 4)
	claim := func(body map[string]any, key string) *response {
		return e.Do(http.MethodPost, claimPath, body, "Idempotency-Key", key)
	}
	body := map[string]any{"worker_id": "w1", "limit": 2}
	first := claim(body, "claim-1")
	require.Equal(t, http.StatusOK, first.Status, first.Body)
	require.Empty(t, first.Header.Get("Idempotent-Replayed"))
	var got api.ClaimResponse
	first.Decode(t, &got)
	require.Len(t, got.Runs, 2)
	handed := runIDs(got.Runs)

	for range 2 {
		again := claim(body, "claim-1")
		require.Equal(t, http.StatusOK, again.Status, again.Body)
		require.Equal(t, "true", again.Header.Get("Idempotent-Replayed"))
		var replay api.ClaimResponse
		again.Decode(t, &replay)
		require.Equal(t, handed, runIDs(replay.Runs))
	}
	require.Equal(t, 2, e.Count(`SELECT count(*) FROM dag_runs WHERE state = 'running'`))
	require.Equal(t, 2, e.Count(`SELECT count(*) FROM dag_runs WHERE state = 'queued'`))

	// One run reported: the replay answers the one still leased.
	e.Report(got.Runs[0], "success")
	var replay api.ClaimResponse
	claim(body, "claim-1").Decode(t, &replay)
	require.Equal(t, []int64{got.Runs[1].Id}, runIDs(replay.Runs))

	// Another request under the key, or the key on another kind of request: 422.
	requireProblem(t, claim(map[string]any{"worker_id": "w1", "limit": 3}, "claim-1"),
		http.StatusUnprocessableEntity, "idempotency_key_reused")
	requireProblem(t, claim(map[string]any{"worker_id": "w2", "limit": 2}, "claim-1"),
		http.StatusUnprocessableEntity, "idempotency_key_reused")
	requireProblem(t, e.Do(http.MethodPost, "/api/v1/webhooks", map[string]any{"url": "https://example.com/h"},
		"Idempotency-Key", "claim-1"), http.StatusUnprocessableEntity, "idempotency_key_reused")
	require.Equal(t, 1, e.Count(`SELECT count(*) FROM dag_runs WHERE state = 'running'`))
	require.Zero(t, e.Count(`SELECT count(*) FROM webhooks`))

	// A claim that found nothing stores its key: its retry answers nothing again.
	empty := map[string]any{"worker_id": "w3", "limit": 1, "dag_id": "ck"}
	e.PatchBackfill(b.Id, map[string]any{"max_active_runs": 1})
	var none api.ClaimResponse
	claim(empty, "claim-2").Decode(t, &none)
	require.Empty(t, none.Runs)
	require.Equal(t, 1, e.Count(`SELECT count(*) FROM idempotency_keys WHERE key = 'claim-2'`))
	e.Report(got.Runs[1], "success")
	res := claim(empty, "claim-2")
	require.Equal(t, "true", res.Header.Get("Idempotent-Replayed"))
	var again api.ClaimResponse
	res.Decode(t, &again)
	require.Empty(t, again.Runs)
}

// Concurrent claims with one key hand out one claim's runs, all answered the same runs.
func TestClaimIdempotencyKeyConcurrentRetriesHandOutOneClaim(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.PutDag("cc", "@daily", "")
	e.DailyBackfill("cc", day(1, 1), day(1, 20), "max_active_runs", 20)
	const n = 12
	var (
		start   sync.WaitGroup
		done    sync.WaitGroup
		mu      sync.Mutex
		answers [][]int64
	)
	start.Add(1)
	for range n {
		done.Go(func() {
			start.Wait()
			res, err := e.do(http.MethodPost, claimPath, map[string]any{"worker_id": "w", "limit": 3}, "Idempotency-Key", "same")
			if err != nil || res.Status != http.StatusOK {
				t.Errorf("claim: %v %v", err, res)
				return
			}
			var got api.ClaimResponse
			res.Decode(t, &got)
			mu.Lock()
			answers = append(answers, runIDs(got.Runs))
			mu.Unlock()
		})
	}
	start.Done()
	done.Wait()
	require.Len(t, answers, n)
	var leased []int64
	require.NoError(t, e.DB.Select(&leased, `SELECT id FROM dag_runs WHERE state = 'running' AND worker_id = 'w' ORDER BY id`))
	require.Len(t, leased, 3)
	for _, a := range answers {
		require.Equal(t, leased, a, "every retry answers the one claim's runs")
	}
	require.Equal(t, 1, e.Count(`SELECT count(*) FROM idempotency_keys WHERE key = 'same'`))
}

// A webhook registered again with its key is the same webhook, secret included; once it is
// deleted, the replay says so.
func TestWebhookIdempotencyKeyAnswersTheSameWebhookAndSecret(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	body := map[string]any{"url": "https://example.com/hook", "event_types": []string{"backfill.created"}}
	first := e.Do(http.MethodPost, "/api/v1/webhooks", body, "Idempotency-Key", "wh-1")
	require.Equal(t, http.StatusCreated, first.Status, first.Body)
	var w api.WebhookWithSecret
	first.Decode(t, &w)
	require.NotEmpty(t, w.Secret)

	again := e.Do(http.MethodPost, "/api/v1/webhooks", body, "Idempotency-Key", "wh-1")
	require.Equal(t, http.StatusCreated, again.Status, again.Body)
	require.Equal(t, "true", again.Header.Get("Idempotent-Replayed"))
	require.Equal(t, first.Header.Get("Location"), again.Header.Get("Location"))
	var replay api.WebhookWithSecret
	again.Decode(t, &replay)
	require.Equal(t, w, replay)
	require.Equal(t, 1, e.Count(`SELECT count(*) FROM webhooks`))

	requireProblem(t, e.Do(http.MethodPost, "/api/v1/webhooks", map[string]any{"url": "https://example.com/other"},
		"Idempotency-Key", "wh-1"), http.StatusUnprocessableEntity, "idempotency_key_reused")

	require.Equal(t, http.StatusNoContent, e.Do(http.MethodDelete, "/api/v1/webhooks/"+strconv.FormatInt(w.Id, 10), nil).Status)
	requireProblem(t, e.Do(http.MethodPost, "/api/v1/webhooks", body, "Idempotency-Key", "wh-1"),
		http.StatusNotFound, "webhook_not_found")
	require.Zero(t, e.Count(`SELECT count(*) FROM webhooks WHERE deleted_at IS NULL`))
}

// A manual run created again with its key is the same run as it is now; confs compare as
// jsonb values; deleting the DAG takes the key with it.
func TestDagRunIdempotencyKeyAnswersTheSameRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.PutDag("mk", "@daily", "")
	path := "/api/v1/dags/mk/runs"
	first := e.Do(http.MethodPost, path, `{"logical_date":"2024-01-01T00:00:00Z","conf":{"n":1.0,"a":[1,2]}}`, "Idempotency-Key", "run-1")
	require.Equal(t, http.StatusCreated, first.Status, first.Body)
	var run api.DagRun
	first.Decode(t, &run)

	e.ClaimN(1, "w", 1)
	now := e.GetRun("mk", run.RunId)
	again := e.Do(http.MethodPost, path, `{"conf":{"a":[1,2],"n":1},"logical_date":"2024-01-01T01:00:00+01:00"}`, "Idempotency-Key", "run-1")
	require.Equal(t, http.StatusCreated, again.Status, again.Body)
	require.Equal(t, "true", again.Header.Get("Idempotent-Replayed"))
	var replay api.DagRun
	again.Decode(t, &replay)
	require.Equal(t, now, replay, "the run as it is now")
	require.Equal(t, 1, e.Count(`SELECT count(*) FROM dag_runs`))

	requireProblem(t, e.Do(http.MethodPost, path, `{"logical_date":"2024-01-01T00:00:00Z","conf":{"n":1.5,"a":[1,2]}}`,
		"Idempotency-Key", "run-1"), http.StatusUnprocessableEntity, "idempotency_key_reused")
	requireProblem(t, e.Do(http.MethodPost, path, `{"logical_date":"2024-01-02T00:00:00Z"}`, "Idempotency-Key", "run-1"),
		http.StatusUnprocessableEntity, "idempotency_key_reused")

	// A failed request stores nothing under its key.
	requireProblem(t, e.Do(http.MethodPost, path, `{"logical_date":"2024-01-01T00:00:00Z"}`, "Idempotency-Key", "run-2"),
		http.StatusConflict, "run_already_exists")
	require.Zero(t, e.Count(`SELECT count(*) FROM idempotency_keys WHERE key = 'run-2'`))

	e.Report(now, "success")
	require.Equal(t, http.StatusNoContent, e.Do(http.MethodDelete, "/api/v1/dags/mk", nil).Status)
	require.Zero(t, e.Count(`SELECT count(*) FROM idempotency_keys`))
	e.PutDag("mk", "@daily", "")
	fresh := e.Do(http.MethodPost, path, `{"logical_date":"2024-01-01T00:00:00Z","conf":{"n":1.0,"a":[1,2]}}`, "Idempotency-Key", "run-1")
	require.Equal(t, http.StatusCreated, fresh.Status, fresh.Body)
	require.Empty(t, fresh.Header.Get("Idempotent-Replayed"), "the key went with the DAG")
}

// Concurrent requests with one key create one manual run and all answer it: the one that
// loses the run's logical date to the first is that request's retry, not a conflict (it
// answered 409 run_already_exists).
func TestDagRunIdempotencyKeyConcurrentRetriesAnswerTheOneRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.PutDag("mkc", "@daily", "")
	const rounds, n = 8, 6
	for r := range rounds {
		body := fmt.Sprintf(`{"logical_date":"2024-01-%02dT00:00:00Z"}`, r+1)
		key := fmt.Sprintf("mkc-%d", r)
		ids := make([]int64, n)
		releaseTogether(t, n, func(i int) error {
			res, err := e.do(http.MethodPost, "/api/v1/dags/mkc/runs", body, "Idempotency-Key", key)
			if err != nil {
				return err
			}
			if res.Status != http.StatusCreated {
				return fmt.Errorf("request %d: %d %s", i, res.Status, res.Body)
			}
			var run api.DagRun
			if err := json.Unmarshal(res.Body, &run); err != nil {
				return err
			}
			ids[i] = run.Id
			return nil
		})
		for _, id := range ids {
			require.Equal(t, ids[0], id, "round %d: every request answers the one run", r)
		}
	}
	require.Equal(t, rounds, e.Count(`SELECT count(*) FROM dag_runs`))
	require.Equal(t, rounds, e.Count(`SELECT count(*) FROM idempotency_keys`))
}

// A worker's report sent again after it was recorded answers 200, as the first did.
func TestReportSentAgainAnswersTheRecordedOutcome(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.PutDag("rr", "@daily", "")
	e.DailyBackfill("rr", day(1, 1), day(1, 1))
	run := e.ClaimN(1, "w", 1)[0]
	first := e.ReportFailed(run, "boom")
	again := call[api.DagRun](e, http.StatusOK, http.MethodPatch, runPath("rr", run.RunId),
		map[string]any{"state": "failed", "worker_id": "w", "note": "boom"})
	require.Equal(t, first, again)
	// Another outcome, note or worker is not the recorded report.
	requireProblem(t, e.PatchRun("rr", run.RunId, "success", "w"), http.StatusConflict, "lease_lost")
	requireProblem(t, e.PatchRun("rr", run.RunId, "failed", "w2"), http.StatusConflict, "lease_lost")
}

// Migration 00012 keeps the backfill keys stored before it: each becomes a backfill key
// naming its backfill and DAG, and a retry of its request is still a replay. Down restores
// them and drops the keys the old table cannot hold.
func TestIdempotencyKeysMigrationKeepsBackfillKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, p := emptyDatabaseWithMigrations(t)
	_, err := p.UpTo(ctx, 11)
	require.NoError(t, err)
	_, err = db.Exec(`
		INSERT INTO dags (dag_id, schedule, timezone, max_active_runs, is_paused, created_at, updated_at)
		VALUES ('m', '@daily', 'UTC', 10, false, now(), now());
		INSERT INTO backfills (id, dag_id, from_date, to_date, run_backwards, reprocess_behavior, max_active_runs,
			state, created_at, updated_at, completed_at)
		OVERRIDING SYSTEM VALUE
		VALUES (7, 'm', '2024-01-01', '2024-01-02', false, 'none', 10, 'succeeded', now(), now(), now());
		INSERT INTO idempotency_keys (key, request_hash, dag_run_conf, backfill_id, created_at) VALUES
			('old', 'h', '{"a": 1}', 7, now()), ('gone', 'h', NULL, 8, now()), ('none', 'h', NULL, NULL, now())`)
	require.NoError(t, err)

	_, err = p.UpTo(ctx, 12)
	require.NoError(t, err)
	type key struct {
		Key       string  `db:"key"`
		Operation string  `db:"operation"`
		IDs       string  `db:"ids"`
		DagID     *string `db:"dag_id"`
		Conf      *string `db:"dag_run_conf"`
	}
	var keys []key
	require.NoError(t, db.Select(&keys, `SELECT key, operation, result_ids::text AS ids, dag_id, dag_run_conf::text
		FROM idempotency_keys ORDER BY key`))
	m := "m"
	conf := `{"a": 1}`
	require.Equal(t, []key{
		{Key: "gone", Operation: "backfill", IDs: "{8}"},
		{Key: "old", Operation: "backfill", IDs: "{7}", DagID: &m, Conf: &conf},
	}, keys)

	_, err = db.Exec(`INSERT INTO idempotency_keys (key, operation, request_hash, result_ids, created_at)
		VALUES ('c', 'claim', 'h', '{1,2}', now())`)
	require.NoError(t, err)
	_, err = p.DownTo(ctx, 11)
	require.NoError(t, err)
	var back []struct {
		Key        string `db:"key"`
		BackfillID int64  `db:"backfill_id"`
	}
	require.NoError(t, db.Select(&back, `SELECT key, backfill_id FROM idempotency_keys ORDER BY key`))
	require.Len(t, back, 2)
	require.Equal(t, "gone", back[0].Key)
	require.Equal(t, int64(8), back[0].BackfillID)
	require.Equal(t, int64(7), back[1].BackfillID)
}
