package tests

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// raceRoundsFor is the number of rounds of a creation race: many, since the interleaving that
// used to answer 500 came about once in a few rounds; fewer with -short.
func raceRoundsFor(t *testing.T, full int) int {
	if testing.Short() {
		return max(full/10, 3)
	}
	return full
}

// 24 concurrent creations of overlapping windows of one DAG, round after round: one 201 and
// 23 × 409 every time, never a 500. A loser's insert of a run the winner is inserting meets
// the run_id key (ON CONFLICT arbitrates the date only); it is run again from a fresh snapshot,
// which sees the winner.
func TestConcurrentCreatesOfOneDagNeverAnswer500(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const n = 24
	rounds := raceRoundsFor(t, 100)
	t.Logf("%d rounds of %d creations", rounds, n)
	total := map[int]int{}
	e.raceRounds(rounds, "create_race", func(i int, dagID string) string {
		e.PutDag(dagID, "@daily", "")
		reqs := make([]request, n)
		for j := range reqs {
			reqs[j] = createRequest(backfillBody(dagID, day(1, 1), day(1, 2+j%5)))
		}
		statuses := tally(e.DoTogether(reqs...))
		for s, c := range statuses {
			total[s] += c
		}
		require.Equal(t, map[int]int{http.StatusCreated: 1, http.StatusConflict: n - 1}, statuses, "round %d", i)
		return "one winner"
	})
	t.Logf("answers: %v", total)
}

// A creation racing the DELETE and re-creation of its DAG answers 201, 404 or 409, never 500:
// the dates that had a run (from a canceled backfill) are read afresh on every attempt, so
// runs deleted with the DAG in between do not leave the creation looking for them.
func TestCreateRacingDagDeleteAndRecreateNeverAnswers500(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const creators = 6
	rounds := raceRoundsFor(t, 30)
	total := map[string]int{}
	e.raceRounds(rounds, "delete_race", func(i int, dagID string) string {
		e.PutDag(dagID, "@daily", "")
		// History: a canceled backfill leaves canceled runs on the dates the creations take.
		old := e.CreateBackfill(backfillBody(dagID, day(1, 1), day(1, 6)))
		e.ActionOK(old.Id, "cancel")
		path := "/api/v1/dags/" + url.PathEscape(dagID)
		reqs := make([]request, creators)
		for j := range creators {
			reqs[j] = createRequest(backfillBody(dagID, day(1, 1), day(1, 3+j%4), "reprocess_behavior", "failed"))
		}
		answers := make([]*response, creators)
		releaseTogether(t, creators+1, func(j int) error {
			if j < creators {
				// A stagger of up to a few milliseconds (seeded by round and creator) lets
				// the delete come first in some rounds and between a creation's steps in
				// others.
				time.Sleep(time.Duration(rand.New(rand.NewPCG(uint64(i), uint64(j))).IntN(4000)) * time.Microsecond)
				var err error
				answers[j], err = e.do(reqs[j].Method, reqs[j].Path, reqs[j].Body)
				return err
			}
			del, err := e.do(http.MethodDelete, path, nil)
			if err != nil {
				return err
			}
			put, err := e.do(http.MethodPut, path, map[string]any{"schedule": "@daily"})
			if err != nil {
				return err
			}
			if del.Status != http.StatusNoContent && del.Status != http.StatusConflict && !refusedHonestly(del) {
				return fmt.Errorf("delete: %d %s", del.Status, del.Body)
			}
			if put.Status >= 300 {
				return fmt.Errorf("put: %d %s", put.Status, put.Body)
			}
			return nil
		})
		for _, res := range answers {
			total[fmt.Sprint(res.Status)]++
			switch {
			case res.Status == http.StatusCreated, res.Status == http.StatusNotFound, res.Status == http.StatusConflict:
			case refusedHonestly(res):
				// A 500 is what this test is for.
			default:
				t.Fatalf("round %d: a creation racing the DAG's delete answered %d: %s", i, res.Status, res.Body)
			}
		}
		return "no 5xx"
	})
	t.Logf("creation answers: %v", total)
}

// refusedHonestly is the contract's refusal of a request that met a lock held past LOCK_WAIT
// (on a machine loaded enough: CI saw the DELETE wait out a creation under -race): 503 busy,
// nothing written.
func refusedHonestly(res *response) bool {
	return res.Status == http.StatusServiceUnavailable && bytes.Contains(res.Body, []byte(`"code":"busy"`)) &&
		bytes.Contains(res.Body, []byte("nothing was written"))
}
