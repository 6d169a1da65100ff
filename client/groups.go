package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
)

// GroupChanges is PatchBackfillGroup's body: the settings of an active group (and of its
// active members) to change; fields left zero keep their value.
type GroupChanges struct {
	// Priority (-10..10) ranks every member in the next claims.
	Priority Field[int32]
	// MaxActiveRuns is per member.
	MaxActiveRuns Field[int32]
	// MaxFailedRuns is the group's budget; Null: none.
	MaxFailedRuns Field[int32]
	// Description Null: none.
	Description Field[string]
}

// MarshalJSON writes the changes as a JSON merge patch.
func (g GroupChanges) MarshalJSON() ([]byte, error) {
	return fields{
		{"priority", g.Priority.json()},
		{"max_active_runs", g.MaxActiveRuns.json()},
		{"max_failed_runs", g.MaxFailedRuns.json()},
		{"description", g.Description.json()},
	}.marshal()
}

// PatchBackfillGroup changes an active group's settings and its active members' in one
// transaction. Codes: backfill_group_not_found, backfill_not_active, invalid_priority.
func (c *Client) PatchBackfillGroup(ctx context.Context, id int64, changes GroupChanges) (BackfillGroup, error) {
	body, err := json.Marshal(changes)
	if err != nil {
		return BackfillGroup{}, fmt.Errorf("client: encode group patch: %w", err)
	}
	resp, err := c.raw().PatchBackfillGroupWithBody(ctx, id, "application/merge-patch+json", bytes.NewReader(body))
	g, _, err := decode[BackfillGroup](resp, err, http.StatusOK)
	return g, err
}
