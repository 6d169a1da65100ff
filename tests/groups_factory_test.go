package tests

import (
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/backfillsvc/backfill/api"
	"github.com/stretchr/testify/require"
)

const groupsPath = "/api/v1/backfill_groups"

func groupPath(id int64) string { return fmt.Sprintf("%s/%d", groupsPath, id) }

// CreateGroup creates a backfill group over [from, to] of dagIDs, with extra name, value
// pairs in its body, and requires 201.
func (e *env) CreateGroup(dagIDs []string, from, to time.Time, extra ...any) api.BackfillGroup {
	e.t.Helper()
	body := fields(map[string]any{"dag_ids": dagIDs, "from_date": ts(from), "to_date": ts(to)}, extra...)
	return call[api.BackfillGroup](e, http.StatusCreated, http.MethodPost, groupsPath, body)
}

// GetGroup reads a group and requires 200.
func (e *env) GetGroup(id int64) api.BackfillGroup {
	e.t.Helper()
	return call[api.BackfillGroup](e, http.StatusOK, http.MethodGet, groupPath(id), nil)
}

// GroupAction PUTs pause, unpause or cancel on a group and returns the answer.
func (e *env) GroupAction(id int64, action string) *response {
	e.t.Helper()
	return e.Do(http.MethodPut, groupPath(id)+"/"+action, nil)
}

// member answers the group's member backfill of dagID.
func member(t require.TestingT, g api.BackfillGroup, dagID string) api.BackfillGroupMember {
	for _, m := range g.Members {
		if m.DagId == dagID {
			return m
		}
	}
	require.Failf(t, "no member", "group %d has no member %q", g.Id, dagID)
	return api.BackfillGroupMember{}
}

// claimed is one claim's run and when it was handed out, in the order claims answered.
type claimed struct {
	run api.DagRun
	seq int
}

// workUntilIdle runs workers that claim one run at a time and report it with outcome (success
// unless it says otherwise), until a claim answers nothing for every worker and no run is left
// running. It answers every run claimed, in claim order.
func (e *env) workUntilIdle(workers int, outcome func(api.DagRun) string) []claimed {
	e.t.Helper()
	var (
		mu  sync.Mutex
		all []claimed
		seq int
		wg  sync.WaitGroup
	)
	idle := make([]bool, workers)
	start := make(chan struct{})
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			worker := fmt.Sprintf("w%d", w)
			for misses := 0; misses < 40; {
				res, err := e.do(http.MethodPost, claimPath, map[string]any{"worker_id": worker, "limit": 1})
				if err != nil || res.Status != http.StatusOK {
					e.t.Errorf("claim: %v %v", err, res)
					return
				}
				var got api.ClaimResponse
				res.Decode(e.t, &got)
				if len(got.Runs) == 0 {
					mu.Lock()
					idle[w] = true
					mu.Unlock()
					misses++
					time.Sleep(10 * time.Millisecond)
					continue
				}
				misses = 0
				run := got.Runs[0]
				mu.Lock()
				idle[w] = false
				seq++
				all = append(all, claimed{run: run, seq: seq})
				mu.Unlock()
				state := "success"
				if outcome != nil {
					state = outcome(run)
				}
				res, err = e.do(http.MethodPatch, runPath(run.DagId, run.RunId), map[string]any{"state": state, "worker_id": worker})
				if err != nil || res.Status != http.StatusOK {
					e.t.Errorf("report %s %s: %v %v", run.DagId, run.RunId, err, res)
					return
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	return all
}
