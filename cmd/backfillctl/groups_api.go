package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/backfillsvc/backfill/client"
	"github.com/backfillsvc/backfill/internal/ctxwait"
)

// The SDK's hand-written helpers (GetBackfill, CreateBackfill, ...) do not cover backfill
// groups; these calls go through the generated client on api.Raw and answer what those
// helpers answer: the value, or a *client.ProblemError for any other status, so that exitCode
// prints a group's problem exactly as it prints a backfill's. They have the shape of a call
// (declare.go), so that get and list take them as they take the SDK's methods.

func getGroup(api *client.Client, ctx context.Context, id int64) (client.BackfillGroup, error) {
	r, err := api.Raw.GetBackfillGroupWithResponse(ctx, id)
	if err != nil {
		return client.BackfillGroup{}, err
	}
	return decoded(r.HTTPResponse, r.Body, http.StatusOK, r.JSON200)
}

func pauseGroup(api *client.Client, ctx context.Context, id int64) (client.BackfillGroup, error) {
	r, err := api.Raw.PauseBackfillGroupWithResponse(ctx, id)
	if err != nil {
		return client.BackfillGroup{}, err
	}
	return decoded(r.HTTPResponse, r.Body, http.StatusOK, r.JSON200)
}

func unpauseGroup(api *client.Client, ctx context.Context, id int64) (client.BackfillGroup, error) {
	r, err := api.Raw.UnpauseBackfillGroupWithResponse(ctx, id)
	if err != nil {
		return client.BackfillGroup{}, err
	}
	return decoded(r.HTTPResponse, r.Body, http.StatusOK, r.JSON200)
}

func cancelGroup(api *client.Client, ctx context.Context, id int64) (client.BackfillGroup, error) {
	r, err := api.Raw.CancelBackfillGroupWithResponse(ctx, id)
	if err != nil {
		return client.BackfillGroup{}, err
	}
	return decoded(r.HTTPResponse, r.Body, http.StatusOK, r.JSON200)
}

func listGroups(ctx context.Context, api *client.Client, params *client.ListBackfillGroupsParams) (client.BackfillGroupCollection, error) {
	r, err := api.Raw.ListBackfillGroupsWithResponse(ctx, params)
	if err != nil {
		return client.BackfillGroupCollection{}, err
	}
	return decoded(r.HTTPResponse, r.Body, http.StatusOK, r.JSON200)
}

func dryRunGroup(ctx context.Context, api *client.Client, req client.BackfillGroupCreate) (client.BackfillGroupDryRun, error) {
	r, err := api.Raw.DryRunBackfillGroupWithResponse(ctx, req)
	if err != nil {
		return client.BackfillGroupDryRun{}, err
	}
	return decoded(r.HTTPResponse, r.Body, http.StatusOK, r.JSON200)
}

// createGroup creates a group as client.CreateBackfill creates a backfill: under
// opts.IdempotencyKey (a random one when empty), sent again with the same key after a 503 or
// a network error, so that a creation whose answer was lost is answered, not made twice.
func createGroup(ctx context.Context, api *client.Client, req client.BackfillGroupCreate, opts client.CreateOptions) (client.BackfillGroup, error) {
	key := opts.IdempotencyKey
	if key == "" {
		key = client.NewIdempotencyKey()
	}
	params := client.CreateBackfillGroupParams{IdempotencyKey: &key}
	if opts.IfPlan != "" {
		quoted := `"` + opts.IfPlan + `"` // If-Match carries an entity tag
		params.IfMatch = &quoted
	}
	if opts.Actor != "" {
		params.XActor = &opts.Actor
	}
	policy := client.DefaultRetry
	wait := policy.Base
	for attempt := 1; ; attempt++ {
		g, err := func() (client.BackfillGroup, error) {
			r, err := api.Raw.CreateBackfillGroupWithResponse(ctx, &params, req)
			if err != nil {
				return client.BackfillGroup{}, err
			}
			return decoded(r.HTTPResponse, r.Body, http.StatusCreated, r.JSON201)
		}()
		if err == nil || attempt >= policy.Attempts || ctx.Err() != nil || !client.Retryable(err) {
			return g, err
		}
		d := wait*3/4 + rand.N(wait/2+1) // jittered, so that many clients do not retry in step
		var p *client.ProblemError
		if errors.As(err, &p) && p.RetryAfter > d {
			d = p.RetryAfter
		}
		if !ctxwait.Sleep(ctx, min(d, policy.Max)) {
			return g, err
		}
		wait = min(wait*2, policy.Max)
	}
}

// decoded is the generated answer's value when its status is want, else the answer as a
// *client.ProblemError.
func decoded[T any](resp *http.Response, body []byte, want int, v *T) (T, error) {
	var zero T
	switch {
	case resp.StatusCode != want:
		return zero, problemOf(resp, body)
	case v == nil:
		return zero, fmt.Errorf("%s %s answered %d without a JSON body", resp.Request.Method, resp.Request.URL.Path, resp.StatusCode)
	}
	return *v, nil
}

// maxProblemDetail is how much of an answer that is not problem+json (a proxy's error page)
// becomes the problem's detail, as the SDK keeps it.
const maxProblemDetail = 200

// problemOf reads a non-2xx answer as the SDK's helpers do. A group's 409
// backfill_already_running names every member DAG that has an active backfill in conflicts;
// they are added to the detail, which says "conflicts lists them", so that stderr does too.
func problemOf(resp *http.Response, body []byte) *client.ProblemError {
	e := &client.ProblemError{Status: resp.StatusCode}
	if n, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && n >= 0 {
		e.RetryAfter = time.Duration(n) * time.Second
	}
	var p client.Problem
	if !strings.Contains(resp.Header.Get("Content-Type"), "json") || json.Unmarshal(body, &p) != nil || p.Code == "" {
		e.Title = http.StatusText(resp.StatusCode)
		e.Detail = strings.TrimSpace(string(body))
		if len(e.Detail) > maxProblemDetail {
			e.Detail = strings.ToValidUTF8(e.Detail[:maxProblemDetail], "") + "..."
		}
		return e
	}
	e.Code, e.Title, e.Detail, e.ActiveBackfillID = p.Code, p.Title, p.Detail, p.ActiveBackfillId
	if p.Errors != nil {
		e.Errors = *p.Errors
	}
	if p.Conflicts != nil && len(*p.Conflicts) > 0 {
		names := make([]string, len(*p.Conflicts))
		for i, c := range *p.Conflicts {
			names[i] = fmt.Sprintf("%s (backfill %d)", c.DagId, c.ActiveBackfillId)
		}
		e.Detail += "; conflicts: " + strings.Join(names, ", ")
	}
	return e
}
