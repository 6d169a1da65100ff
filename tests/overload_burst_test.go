package tests

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A burst of 24 concurrent creations is an ordinary client: on a service with the production
// admission settings, while the database is kept busy, every one is answered 201 or 409, never
// 503 busy. Five rounds, each on one DAG (exactly one 201) and on 24 DAGs (24 × 201).
//
// Whether the production waits (ADMISSION_LONG_WAIT 1 s, LOCK_WAIT 2 s) suffice is a
// wall-clock claim: `make test-timing` checks it with them exactly. Other runs scale them to the
// machine's load (by 1 on a quiet machine), since on a loaded one (stress -c 4 beside other
// work on 2 cores) the burst's own requests take longer than those waits to be served, and
// what is checked there is that admission queues a burst rather than sheds it.
func TestBurstsOfCreatesAreQueuedNotShed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	scale := 1.0
	if !timingRun() {
		scale = loadFactor()
	}
	t.Logf("admission waits and LOCK_WAIT scaled by %.1f", scale)
	adm, obs := productionShapeScaled(t, e, 2*time.Second, scale)
	// Warm the pool, as a service that has been up a while has it: 24 fresh connections at
	// once cost more than the burst's own work on a loaded machine (a race build shed 8 of the
	// first round's creations on cold connections).
	reads := make([]request, 20)
	for i := range reads {
		reads[i] = request{Method: http.MethodGet, Path: "/api/v1/dags"}
	}
	adm.DoTogether(reads...)
	loadDatabase(t, e, 2)
	const n = 24
	for round := range 5 {
		one := fmt.Sprintf("burst_one_%d", round)
		adm.PutDag(one, "@daily", "")
		reqs := make([]request, n)
		for i := range reqs {
			reqs[i] = createRequest(backfillBody(one, day(1, 1), day(1, 2+i%5)))
		}
		statuses := tally(adm.DoTogether(reqs...))
		require.Equal(t, map[int]int{http.StatusCreated: 1, http.StatusConflict: n - 1}, statuses,
			"round %d, one DAG", round)

		for i := range reqs {
			dag := fmt.Sprintf("burst_many_%d_%d", round, i)
			adm.PutDag(dag, "@daily", "")
			reqs[i] = createRequest(backfillBody(dag, day(1, 1), day(1, 2+i%5)))
		}
		statuses = tally(adm.DoTogether(reqs...))
		require.Equal(t, map[int]int{http.StatusCreated: n}, statuses, "round %d, 24 DAGs", round)
	}
	admitted, shed := obs.counts()
	t.Logf("admitted %v, shed %v", admitted, shed)
	require.Empty(t, shed)
	checkInvariants(t, e.DB)
}

// tally counts answers by status.
func tally(answers []*response) map[int]int {
	out := map[int]int{}
	for _, res := range answers {
		out[res.Status]++
	}
	return out
}
