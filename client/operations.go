package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
)

// PutDag creates or replaces a DAG. created is true when the DAG did not exist (201).
func (c *Client) PutDag(ctx context.Context, dagID string, body DagPut) (d Dag, created bool, err error) {
	resp, err := c.raw().PutDag(ctx, dagID, body)
	d, r, err := decode[Dag](resp, err, http.StatusOK, http.StatusCreated)
	return d, err == nil && r.StatusCode == http.StatusCreated, err
}

// GetDag reads a DAG (404 dag_not_found).
func (c *Client) GetDag(ctx context.Context, dagID string) (Dag, error) {
	resp, err := c.raw().GetDag(ctx, dagID)
	d, _, err := decode[Dag](resp, err, http.StatusOK)
	return d, err
}

// ListDags reads a page of DAGs ordered by dag_id; params may be nil.
func (c *Client) ListDags(ctx context.Context, params *ListDagsParams) (DagCollection, error) {
	resp, err := c.raw().ListDags(ctx, params)
	l, _, err := decode[DagCollection](resp, err, http.StatusOK)
	return l, err
}

// CreateBackfill creates a backfill with all its runs in one transaction. It sends
// opts.IdempotencyKey (a random one when empty) and is retried with it as Client.Retry says:
// the same key with the same request answers the backfill it created the first time (as it
// is now) and creates nothing; with a different request it is a *ProblemError with code
// idempotency_key_reused. With opts.IfPlan it creates only that plan (code plan_changed
// otherwise). A DAG that already has an active backfill is code backfill_already_running
// with ActiveBackfillID.
func (c *Client) CreateBackfill(ctx context.Context, req BackfillCreate, opts CreateOptions) (Backfill, error) {
	key := keyOr(opts.IdempotencyKey)
	params := CreateBackfillParams{IdempotencyKey: &key, IfMatch: ifMatch(opts.IfPlan), XActor: actor(opts.Actor)}
	return withRetry(ctx, c, func() (Backfill, error) {
		resp, err := c.raw().CreateBackfill(ctx, &params, req)
		b, _, err := decode[Backfill](resp, err, http.StatusCreated)
		return b, err
	})
}

// DryRunBackfill answers what CreateBackfill would do with req, slot by slot, writing
// nothing. It is never backfill_already_running.
func (c *Client) DryRunBackfill(ctx context.Context, req BackfillCreate) (DryRunCollection, error) {
	resp, err := c.raw().DryRunBackfill(ctx, req)
	l, _, err := decode[DryRunCollection](resp, err, http.StatusOK)
	return l, err
}

// GetBackfill reads a backfill with its progress (404 backfill_not_found).
func (c *Client) GetBackfill(ctx context.Context, id int64) (Backfill, error) {
	resp, err := c.raw().GetBackfill(ctx, id)
	b, _, err := decode[Backfill](resp, err, http.StatusOK)
	return b, err
}

// ListBackfills reads a page of backfills; params may be nil.
func (c *Client) ListBackfills(ctx context.Context, params *ListBackfillsParams) (BackfillCollection, error) {
	resp, err := c.raw().ListBackfills(ctx, params)
	l, _, err := decode[BackfillCollection](resp, err, http.StatusOK)
	return l, err
}

// ListBackfillDagRuns reads a page of a backfill's slots; params may be nil.
func (c *Client) ListBackfillDagRuns(ctx context.Context, id int64, params *ListBackfillDagRunsParams) (BackfillDagRunCollection, error) {
	resp, err := c.raw().ListBackfillDagRuns(ctx, id, params)
	l, _, err := decode[BackfillDagRunCollection](resp, err, http.StatusOK)
	return l, err
}

// PauseBackfill stops further claims of a backfill's runs (409 backfill_not_active when it
// is canceling or terminal).
func (c *Client) PauseBackfill(ctx context.Context, id int64) (Backfill, error) {
	resp, err := c.raw().PauseBackfill(ctx, id)
	b, _, err := decode[Backfill](resp, err, http.StatusOK)
	return b, err
}

// UnpauseBackfill lets a paused backfill's runs be claimed again.
func (c *Client) UnpauseBackfill(ctx context.Context, id int64) (Backfill, error) {
	resp, err := c.raw().UnpauseBackfill(ctx, id)
	b, _, err := decode[Backfill](resp, err, http.StatusOK)
	return b, err
}

// CancelBackfill cancels a backfill: its queued runs become canceled at once, its running
// runs are asked to stop through their heartbeats. The answer is the backfill, canceling
// or already canceled.
func (c *Client) CancelBackfill(ctx context.Context, id int64) (Backfill, error) {
	resp, err := c.raw().CancelBackfill(ctx, id)
	b, _, err := decode[Backfill](resp, err, http.StatusOK)
	return b, err
}

// ClaimRuns leases up to req.Limit queued runs to req.WorkerId; possibly none. It sends
// opts.IdempotencyKey (a random one when empty) and is retried with it as Client.Retry says:
// a claim that was applied but whose answer was lost is answered again (the runs it handed
// out that are still leased to the worker), so no run is leased to the worker unseen. A
// caller whose call still failed and that wants to be sure sends the same request with the
// same key again later.
func (c *Client) ClaimRuns(ctx context.Context, req ClaimRequest, opts KeyOptions) ([]DagRun, error) {
	key := keyOr(opts.IdempotencyKey)
	params := ClaimRunsParams{IdempotencyKey: &key}
	return withRetry(ctx, c, func() ([]DagRun, error) {
		resp, err := c.raw().ClaimRuns(ctx, &params, req)
		l, _, err := decode[ClaimResponse](resp, err, http.StatusOK)
		return l.Runs, err
	})
}

// CreateDagRun creates a queued manual run of the DAG at req.LogicalDate (codes
// run_already_exists, dag_not_found), under opts.IdempotencyKey (a random one when empty)
// and retried with it as Client.Retry says.
func (c *Client) CreateDagRun(ctx context.Context, dagID string, req DagRunCreate, opts KeyOptions) (DagRun, error) {
	key := keyOr(opts.IdempotencyKey)
	params := CreateDagRunParams{IdempotencyKey: &key}
	return withRetry(ctx, c, func() (DagRun, error) {
		resp, err := c.raw().CreateDagRun(ctx, dagID, &params, req)
		r, _, err := decode[DagRun](resp, err, http.StatusCreated)
		return r, err
	})
}

// HeartbeatRun extends the lease the worker holds on the run with this numeric id. A lease
// that is gone is a *ProblemError with code lease_lost.
func (c *Client) HeartbeatRun(ctx context.Context, id int64, workerID string) (HeartbeatResponse, error) {
	resp, err := c.raw().HeartbeatRun(ctx, id, HeartbeatRequest{WorkerId: workerID})
	h, _, err := decode[HeartbeatResponse](resp, err, http.StatusOK)
	return h, err
}

// ReportRun reports a run's outcome (success, failed or canceled), with the worker that
// holds it and a note as RunReport says.
func (c *Client) ReportRun(ctx context.Context, dagID, runID string, report RunReport) (DagRun, error) {
	var editors []RequestEditorFn
	if report.Traceparent != "" {
		editors = append(editors, func(_ context.Context, req *http.Request) error {
			req.Header.Set("traceparent", report.Traceparent)
			return nil
		})
	}
	resp, err := c.raw().PatchDagRun(ctx, dagID, runID, report.patch(), editors...)
	r, _, err := decode[DagRun](resp, err, http.StatusOK)
	return r, err
}

// ReleaseRun hands a running run back: it is queued again with the same attempt. A run the
// worker no longer holds is a *ProblemError with code lease_lost.
func (c *Client) ReleaseRun(ctx context.Context, id int64, workerID string) (DagRun, error) {
	resp, err := c.raw().ReleaseRun(ctx, id, ReleaseRequest{WorkerId: workerID})
	r, _, err := decode[DagRun](resp, err, http.StatusOK)
	return r, err
}

// PatchBackfill changes settings of an active backfill (a JSON merge patch of the fields
// that changes sets). A terminal backfill is code backfill_not_active.
func (c *Client) PatchBackfill(ctx context.Context, id int64, changes BackfillChanges) (Backfill, error) {
	body, err := json.Marshal(changes)
	if err != nil {
		return Backfill{}, fmt.Errorf("client: encode patch: %w", err)
	}
	resp, err := c.raw().PatchBackfillWithBody(ctx, id, "application/merge-patch+json", bytes.NewReader(body))
	b, _, err := decode[Backfill](resp, err, http.StatusOK)
	return b, err
}

// RetryBackfill creates a backfill of a terminal backfill's failed and canceled slots, with
// req's settings (each left out is the parent's); opts work as for CreateBackfill. Codes:
// backfill_not_terminal, no_runs_to_create, backfill_already_running, plan_changed.
func (c *Client) RetryBackfill(ctx context.Context, id int64, req RetryRequest, opts RetryOptions) (Backfill, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return Backfill{}, fmt.Errorf("client: encode retry: %w", err)
	}
	key := keyOr(opts.IdempotencyKey)
	params := RetryBackfillParams{IdempotencyKey: &key, IfMatch: ifMatch(opts.IfPlan), XActor: actor(opts.Actor)}
	return withRetry(ctx, c, func() (Backfill, error) {
		resp, err := c.raw().RetryBackfillWithBody(ctx, id, &params, "application/json", bytes.NewReader(body))
		b, _, err := decode[Backfill](resp, err, http.StatusCreated)
		return b, err
	})
}

// DeleteDag removes a DAG with its runs and backfill history. Codes:
// backfill_already_running, runs_in_flight, dag_not_found.
func (c *Client) DeleteDag(ctx context.Context, dagID string) error {
	resp, err := c.raw().DeleteDag(ctx, dagID)
	if err == nil && resp.StatusCode == http.StatusNoContent {
		return resp.Body.Close()
	}
	_, _, err = decode[struct{}](resp, err) // any other status is a problem
	return err
}

// Terminal reports whether a backfill in this state will never change again.
func (s BackfillState) Terminal() bool {
	return s == BackfillStateSucceeded || s == BackfillStateFailed || s == BackfillStateCanceled
}

// Terminal reports whether a run in this state is finished.
func (s DagRunState) Terminal() bool {
	return s == DagRunStateSuccess || s == DagRunStateFailed || s == DagRunStateCanceled
}

// Done is the number of slots that are finished: success, failed, canceled or skipped.
func (p BackfillProgress) Done() int64 { return p.Success + p.Failed + p.Canceled + p.Skipped }

// actor is the X-Actor header's value: nil (not sent) when empty.
func actor(name string) *Actor {
	if name == "" {
		return nil
	}
	return &name
}
