package client

import (
	"context"
	"net/http"
)

// PutPool creates a pool or replaces its settings; created is true when it did not exist
// (201). Lowering slots stops nothing that runs.
func (c *Client) PutPool(ctx context.Context, name string, body PoolPut) (p Pool, created bool, err error) {
	resp, err := c.raw().PutPool(ctx, name, body)
	p, r, err := decode[Pool](resp, err, http.StatusOK, http.StatusCreated)
	return p, err == nil && r.StatusCode == http.StatusCreated, err
}

// GetPool reads a pool with its running and queued runs (404 pool_not_found).
func (c *Client) GetPool(ctx context.Context, name string) (Pool, error) {
	resp, err := c.raw().GetPool(ctx, name)
	p, _, err := decode[Pool](resp, err, http.StatusOK)
	return p, err
}

// ListPools reads a page of pools ordered by name; params may be nil.
func (c *Client) ListPools(ctx context.Context, params *ListPoolsParams) (PoolCollection, error) {
	resp, err := c.raw().ListPools(ctx, params)
	l, _, err := decode[PoolCollection](resp, err, http.StatusOK)
	return l, err
}

// DeletePool deletes a pool. Codes: pool_in_use (an active backfill or an unfinished run
// outside backfills names it), pool_not_found.
func (c *Client) DeletePool(ctx context.Context, name string) error {
	resp, err := c.raw().DeletePool(ctx, name)
	if err == nil && resp.StatusCode == http.StatusNoContent {
		return resp.Body.Close()
	}
	_, _, err = decode[struct{}](resp, err)
	return err
}
