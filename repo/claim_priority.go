package repo

import (
	"strconv"
	"time"
)

// Backfill priorities: higher is claimed first (claim.go, backfill_rank). The range is the
// database's too (backfills_priority_range, migrations/00031).
const (
	MinPriority = -10
	MaxPriority = 10
)

// DefaultPriorityAging is how long a claimable backfill waits for its effective priority to
// rise by one (PRIORITY_AGING): a priority −10 backfill passed over by priority 10 work
// reaches it within 20 of these, and is served at the next claim after.
const DefaultPriorityAging = 10 * time.Minute

// claimAgingParam is the number of the claim's parameter that holds PRIORITY_AGING in
// seconds: the last, after the scope's filters.
func claimAgingParam(scope claimScope) string {
	n := 4
	if scope&claimOneDag != 0 {
		n++
	}
	if scope&claimInPool != 0 {
		n++
	}
	return "$" + strconv.Itoa(n) + "::float8"
}

// effectivePriority is a claimable backfill's rank in the claim: its priority, plus one for
// each PRIORITY_AGING (aging, a parameter in seconds) it has waited since it was last handed
// a run or last became claimable (claim_wait_since, kept by migrations/00031's trigger). A
// backfill that is served does not age; one that is passed over rises until it is served, so
// a low priority delays work but never starves it.
func effectivePriority(aging string) string {
	return `(priority + floor(greatest(extract(epoch FROM backfill_now() - claim_wait_since)::float8, 0) / ` + aging + `))`
}

// backfillRankOrder is the order in which a claim serves claimable backfills: effective
// priority, highest first; among equals, the lower priority first (it has aged to get there:
// a priority −10 backfill that has waited 20 agings goes before priority 10 work that is
// served all along, instead of one aging later); then the existing fairness, oldest first.
func backfillRankOrder(aging string) string {
	return effectivePriority(aging) + ` DESC, priority, id`
}

// PriorityAging answers the Store's PRIORITY_AGING.
func (s *Store) PriorityAging() time.Duration { return s.priorityAging }
