package client

import (
	"context"
	"iter"
	"net/http"
)

// Ptr returns a pointer to v, for the optional fields and parameters of requests:
// client.ListDagRunsParams{State: client.Ptr(client.DagRunStateFailed)}.
func Ptr[T any](v T) *T { return &v }

// ListDagRuns reads a page of a DAG's runs ordered by logical date; params may be nil (404
// dag_not_found for an unknown DAG).
func (c *Client) ListDagRuns(ctx context.Context, dagID string, params *ListDagRunsParams) (DagRunCollection, error) {
	resp, err := c.raw().ListDagRuns(ctx, dagID, params)
	l, _, err := decode[DagRunCollection](resp, err, http.StatusOK)
	return l, err
}

// GetDagRun reads one run by its DAG and run_id.
func (c *Client) GetDagRun(ctx context.Context, dagID, runID string) (DagRun, error) {
	resp, err := c.raw().GetDagRun(ctx, dagID, runID)
	r, _, err := decode[DagRun](resp, err, http.StatusOK)
	return r, err
}

// ListBackfillRuns reads a page of a backfill's slots in sort order, only those in state
// when state is not empty (for example DagRunStateFailed, with each run's note and attempt).
func (c *Client) ListBackfillRuns(ctx context.Context, id int64, state DagRunState, limit int) (BackfillDagRunCollection, error) {
	params := &ListBackfillDagRunsParams{}
	if state != "" {
		params.State = &state
	}
	if limit > 0 {
		params.Limit = &limit
	}
	return c.ListBackfillDagRuns(ctx, id, params)
}

// AllDagRuns iterates over every run of a DAG that params select, in logical-date order,
// following next_cursor page by page (params' Limit is the page size; its Offset and
// Cursor are ignored). It stops at the first error, which it yields.
func (c *Client) AllDagRuns(ctx context.Context, dagID string, params *ListDagRunsParams) iter.Seq2[DagRun, error] {
	p := ListDagRunsParams{}
	if params != nil {
		p = *params
	}
	p.Offset, p.Cursor = nil, nil
	return paged(func() ([]DagRun, *string, error) {
		l, err := c.ListDagRuns(ctx, dagID, &p)
		return l.DagRuns, l.NextCursor, err
	}, func(next *string) { p.Cursor = next })
}

// AllBackfillRuns iterates over every slot of a backfill that params select (a state, an
// order), following next_cursor page by page. It stops at the first error, which it yields.
func (c *Client) AllBackfillRuns(ctx context.Context, id int64, params *ListBackfillDagRunsParams) iter.Seq2[BackfillDagRun, error] {
	p := ListBackfillDagRunsParams{}
	if params != nil {
		p = *params
	}
	p.Offset, p.Cursor = nil, nil
	return paged(func() ([]BackfillDagRun, *string, error) {
		l, err := c.ListBackfillDagRuns(ctx, id, &p)
		return l.BackfillDagRuns, l.NextCursor, err
	}, func(next *string) { p.Cursor = next })
}

// AllBackfills iterates over every backfill that params select, following next_cursor.
func (c *Client) AllBackfills(ctx context.Context, params *ListBackfillsParams) iter.Seq2[Backfill, error] {
	p := ListBackfillsParams{}
	if params != nil {
		p = *params
	}
	p.Offset, p.Cursor = nil, nil
	return paged(func() ([]Backfill, *string, error) {
		l, err := c.ListBackfills(ctx, &p)
		return l.Backfills, l.NextCursor, err
	}, func(next *string) { p.Cursor = next })
}

// paged yields the entries of page after page: read answers one page and its next cursor,
// setCursor points the next read after it.
func paged[T any](read func() ([]T, *string, error), setCursor func(*string)) iter.Seq2[T, error] {
	return func(yield func(T, error) bool) {
		for {
			entries, next, err := read()
			if err != nil {
				var zero T
				yield(zero, err)
				return
			}
			for _, e := range entries {
				if !yield(e, nil) {
					return
				}
			}
			if next == nil {
				return
			}
			setCursor(next)
		}
	}
}
