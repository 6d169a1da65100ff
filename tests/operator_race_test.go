package tests

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/backfillsvc/backfill/api"
	"github.com/backfillsvc/backfill/tests/internal/loadkit"
)

// operatorCounters are the operator figures of the race test.
type operatorCounters struct {
	budgetCreated, patches, patchesRefused atomic.Int64
	retries, retriesRefused                atomic.Int64
	released, releasesLost, failedWithNote atomic.Int64
	budgetPausesSeen                       atomic.Int64
}

func (c *operatorCounters) log(t testing.TB) {
	t.Logf("operator: backfills with a budget %d; patches %d (%d refused); retries created %d (%d refused); releases %d (%d lease_lost); failures with a note %d; budget pauses seen %d",
		c.budgetCreated.Load(), c.patches.Load(), c.patchesRefused.Load(), c.retries.Load(), c.retriesRefused.Load(),
		c.released.Load(), c.releasesLost.Load(), c.failedWithNote.Load(), c.budgetPausesSeen.Load())
}

// startOperatorLoad adds the operator's load to the race test: backfills with a failure
// budget, PATCHes of live settings, retries of finished backfills, and a worker that
// releases or fails (with a note) what it claims. remember records a created backfill.
func startOperatorLoad(e *env, goLoad func(uint64, func(*rand.Rand)), pick func(*rand.Rand) (int64, bool),
	remember func(int64), errs *loadFailures, dags []string) *operatorCounters {
	c := &operatorCounters{}
	base := day(1, 1).AddDate(-4, 0, 0)

	// Creations with a budget of 1..3 failures.
	goLoad(500, func(rng *rand.Rand) {
		from := base.AddDate(0, 0, rng.IntN(1500))
		body := backfillBody(dags[rng.IntN(len(dags))], from, from.AddDate(0, 0, rng.IntN(8)),
			"max_active_runs", 1+rng.IntN(4), "max_failed_runs", 1+rng.IntN(3), "reprocess_behavior", "failed")
		res, err := e.do(http.MethodPost, "/api/v1/backfills", body)
		if errs.expect("create with budget", res, err, map[int]string{201: "", 409: "backfill_already_running"}) == http.StatusCreated {
			var b api.Backfill
			if json.Unmarshal(res.Body, &b) == nil {
				c.budgetCreated.Add(1)
				remember(b.Id)
			}
		}
	})

	// PATCH and retry of recent backfills.
	goLoad(501, func(rng *rand.Rand) {
		id, ok := pick(rng)
		if !ok {
			return
		}
		if rng.IntN(2) == 0 {
			patch := map[string]any{"max_active_runs": 1 + rng.IntN(5)}
			switch rng.IntN(3) {
			case 0:
				patch["max_failed_runs"] = 1 + rng.IntN(4)
			case 1:
				patch["max_failed_runs"] = nil
			}
			res, err := e.do(http.MethodPatch, backfillPath(id), patch)
			switch errs.expect("patch", res, err, map[int]string{200: "", 409: "backfill_not_active"}) {
			case http.StatusOK:
				c.patches.Add(1)
				var b api.Backfill
				if json.Unmarshal(res.Body, &b) == nil && b.PauseReason != nil && *b.PauseReason == api.BackfillPauseReasonFailureBudget {
					c.budgetPausesSeen.Add(1)
				}
			case http.StatusConflict:
				c.patchesRefused.Add(1)
			}
			return
		}
		// Mostly, retry a failed backfill as an operator would: find one, cancel what its DAG
		// runs now (the creators keep every DAG busy), retry. The creators race the retry.
		if rng.IntN(4) != 0 {
			var l api.BackfillCollection
			res, err := e.do(http.MethodGet, "/api/v1/backfills?state=failed&order_by=-id&limit=10", nil)
			if errs.expect("list failed", res, err, map[int]string{200: ""}) != http.StatusOK ||
				json.Unmarshal(res.Body, &l) != nil || len(l.Backfills) == 0 {
				return
			}
			parent := l.Backfills[rng.IntN(len(l.Backfills))]
			id = parent.Id
			res, err = e.do(http.MethodGet, "/api/v1/backfills?active=true&dag_id="+parent.DagId, nil)
			if errs.expect("list active", res, err, map[int]string{200: ""}) == http.StatusOK && json.Unmarshal(res.Body, &l) == nil {
				for _, b := range l.Backfills {
					res, err := e.do(http.MethodPut, backfillPath(b.Id)+"/cancel", nil)
					errs.expect("cancel before retry", res, err, map[int]string{200: "", 409: "backfill_not_active"})
				}
			}
		}
		res, err := e.do(http.MethodPost, retryPath(id), map[string]any{"max_failed_runs": 1 + rng.IntN(3)})
		switch errs.expectCodes("retry", res, err, map[int][]string{
			201: nil, 409: {"backfill_not_terminal", "backfill_already_running"}, 422: {"no_runs_to_create"}}) {
		case http.StatusCreated:
			var b api.Backfill
			if json.Unmarshal(res.Body, &b) == nil {
				if b.ParentBackfillId == nil || *b.ParentBackfillId != id {
					errs.Add("retry of %d answered parent %v", id, b.ParentBackfillId)
				}
				c.retries.Add(1)
				remember(b.Id)
			}
		case http.StatusConflict, http.StatusUnprocessableEntity:
			c.retriesRefused.Add(1)
		}
	})

	// A worker that hands back a third of what it claims and fails another third with a note.
	goLoad(502, func(rng *rand.Rand) {
		res, err := e.do(http.MethodPost, claimPath, map[string]any{"worker_id": "rel", "limit": 1 + rng.IntN(3), "lease_seconds": 30})
		if errs.expect("claim (rel)", res, err, map[int]string{200: ""}) != http.StatusOK {
			return
		}
		claim, ok := loadkit.Decode[api.ClaimResponse](errs, "claim", res.Body)
		if !ok {
			return
		}
		for _, run := range claim.Runs {
			switch rng.IntN(3) {
			case 0:
				res, err := e.do(http.MethodPost, releasePath(run.Id), map[string]any{"worker_id": "rel"})
				switch errs.expect("release", res, err, map[int]string{200: "", 409: "lease_lost"}) {
				case http.StatusOK:
					c.released.Add(1)
					var r api.DagRun
					if json.Unmarshal(res.Body, &r) == nil &&
						!((r.State == api.DagRunStateQueued && r.Attempt == run.Attempt) || r.State == api.DagRunStateCanceled) {
						errs.Add("release of run %d (attempt %d) left it %s at attempt %d", run.Id, run.Attempt, r.State, r.Attempt)
					}
				case http.StatusConflict:
					c.releasesLost.Add(1)
				}
			case 1:
				note := fmt.Sprintf("attempt %d failed", run.Attempt)
				res, err := e.do(http.MethodPatch, runPath(run.DagId, run.RunId), map[string]any{"state": "failed", "worker_id": "rel", "note": note})
				if errs.expect("fail with note", res, err, map[int]string{200: "", 409: "lease_lost"}) == http.StatusOK {
					c.failedWithNote.Add(1)
					var r api.DagRun
					if json.Unmarshal(res.Body, &r) == nil && (r.Note == nil || *r.Note != note) {
						errs.Add("failed run %d shows note %v", r.Id, r.Note)
					}
				}
			default:
				res, err := e.do(http.MethodPatch, runPath(run.DagId, run.RunId), map[string]any{"state": "success", "worker_id": "rel"})
				errs.expect("report (rel)", res, err, map[int]string{200: "", 409: "lease_lost"})
			}
		}
	})
	return c
}
