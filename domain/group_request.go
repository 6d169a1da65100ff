package domain

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strconv"
	"time"
)

// GroupRequest asks for a backfill group: the targets, which of their downstreams join, and
// the settings every member backfill gets.
type GroupRequest struct {
	DagIDs            []string
	IncludeDownstream IncludeDownstream
	FromDate          time.Time
	ToDate            time.Time
	RunBackwards      bool
	// DagRunConf is the client's JSON (nil for none), compared as jsonb beside the request's
	// fingerprint rather than in it (as a backfill's).
	DagRunConf        []byte `json:"-"`
	ReprocessBehavior ReprocessBehavior
	// MaxActiveRuns is per member; MaxFailedRuns (nil for none) is the group's budget.
	MaxActiveRuns int
	MaxFailedRuns *int
	Description   *string
	Pool          *string
	Priority      int
	CodeRef       *string
	CreatedBy     *string
	Reason        *string
	// IdempotencyKey is "" when the request carries none; IfMatch binds the creation to a
	// group plan digest (nil binds nothing).
	IdempotencyKey string   `json:"-"`
	IfMatch        []string `json:"-"`
}

// Fingerprint is the request's idempotency fingerprint: the same request in any time zone is
// the same request.
func (r GroupRequest) Fingerprint() (Fingerprint, error) {
	r.FromDate, r.ToDate = r.FromDate.UTC(), r.ToDate.UTC()
	return RequestFingerprint(r, r.DagRunConf)
}

// Member is the request for the member backfill of dagID at depth in group groupID (0 for a
// plan not written).
func (r GroupRequest) Member(dagID string, groupID int64, depth int) BackfillRequest {
	m := BackfillRequest{
		DagID: dagID, FromDate: r.FromDate, ToDate: r.ToDate, RunBackwards: r.RunBackwards,
		DagRunConf: r.DagRunConf, ReprocessBehavior: r.ReprocessBehavior, MaxActiveRuns: r.MaxActiveRuns,
		Description: r.Description, Pool: r.Pool, CodeRef: r.CodeRef, CreatedBy: r.CreatedBy,
		Reason: r.Reason, Priority: r.Priority, GroupDepth: depth,
	}
	if groupID != 0 {
		m.GroupID = &groupID
	}
	return m
}

// GroupMemberPlanHash is one member's part of a group's plan digest.
type GroupMemberPlanHash struct {
	DagID    string
	Depth    int
	PlanHash string
}

// GroupPlanHash digests a group's plan: each member's DAG, depth and plan digest (PlanHash),
// by dag_id, and the number of run-to-run dependencies. Equal digests mean the group is
// created with the members, slots and dependencies its dry run showed.
func GroupPlanHash(members []GroupMemberPlanHash, dependencies int) string {
	sorted := slices.Clone(members)
	slices.SortFunc(sorted, func(a, b GroupMemberPlanHash) int {
		switch {
		case a.DagID < b.DagID:
			return -1
		case a.DagID > b.DagID:
			return 1
		}
		return 0
	})
	h := sha256.New()
	buf := []byte("group/v1;")
	for _, m := range sorted {
		for _, f := range []string{m.DagID, strconv.Itoa(m.Depth), m.PlanHash} {
			buf = strconv.AppendInt(buf, int64(len(f)), 10)
			buf = append(buf, ':')
			buf = append(buf, f...)
		}
	}
	buf = strconv.AppendInt(buf, int64(dependencies), 10)
	h.Write(buf)
	return hex.EncodeToString(h.Sum(nil))
}
