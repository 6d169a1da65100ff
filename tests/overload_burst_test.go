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
func TestBurstsOfCreatesAreQueuedNotShed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	adm, obs := productionShape(t, e, 2*time.Second)
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
