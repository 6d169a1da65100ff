//go:build ha

package ha

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"sort"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
)

type runAnswer struct {
	ID      int64  `json:"id"`
	DagID   string `json:"dag_id"`
	RunID   string `json:"run_id"`
	State   string `json:"state"`
	Attempt int    `json:"attempt"`
}

var (
	dagPath     = regexp.MustCompile(`^/api/v1/dags/([^/]+)$`)
	reportPath  = regexp.MustCompile(`^/api/v1/dags/([^/]+)/runs/([^/]+)$`)
	releasePath = regexp.MustCompile(`^/api/v1/runs/(\d+)/release$`)
)

// lostWrites returns every acknowledged write that the surviving database does not show:
// a DAG put, a backfill created, a run reported (in the state answered), a claim (its run
// still queued at the attempt claimed, though never released).
func lostWrites(t *testing.T, db *sqlx.DB, history []record) []record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	released := map[int64]bool{}
	for _, r := range history {
		if m := releasePath.FindStringSubmatch(r.Path); m != nil && r.ok() {
			var id int64
			fmt.Sscan(m[1], &id)
			released[id] = true
		}
	}
	var lost []record
	missing := func(r record, why string, args ...any) {
		t.Logf("lost: %s %s answered %d at %s: %s", r.Method, r.Path, r.Status, r.End.Format(time.RFC3339Nano), fmt.Sprintf(why, args...))
		lost = append(lost, r)
	}
	count := func(query string, args ...any) int {
		var n int
		if err := db.GetContext(ctx, &n, query, args...); err != nil {
			t.Fatalf("check %q: %v", query, err)
		}
		return n
	}
	for _, r := range history {
		if !r.ok() || !r.write() {
			continue
		}
		switch {
		case r.Method == http.MethodPut && dagPath.MatchString(r.Path):
			dag := dagPath.FindStringSubmatch(r.Path)[1]
			if count(`SELECT count(*) FROM dags WHERE dag_id = $1`, dag) != 1 {
				missing(r, "DAG %s absent", dag)
			}
		case r.Method == http.MethodPost && r.Path == "/api/v1/backfills":
			var b struct {
				ID    int64  `json:"id"`
				DagID string `json:"dag_id"`
			}
			_ = json.Unmarshal(r.Body, &b)
			if count(`SELECT count(*) FROM backfills WHERE id = $1 AND dag_id = $2`, b.ID, b.DagID) != 1 {
				missing(r, "backfill %d of %s absent", b.ID, b.DagID)
			}
		case r.Method == http.MethodPatch && reportPath.MatchString(r.Path):
			var run runAnswer
			_ = json.Unmarshal(r.Body, &run)
			if count(`SELECT count(*) FROM dag_runs WHERE id = $1 AND state = $2`, run.ID, run.State) != 1 {
				missing(r, "run %d not %s", run.ID, run.State)
			}
		case r.Method == http.MethodPost && r.Path == "/api/v1/runs/claim":
			var claim struct {
				Runs []runAnswer `json:"runs"`
			}
			_ = json.Unmarshal(r.Body, &claim)
			for _, run := range claim.Runs {
				if released[run.ID] {
					continue
				}
				if count(`SELECT count(*) FROM dag_runs WHERE id = $1 AND NOT (state = 'queued' AND attempt = $2)`, run.ID, run.Attempt) != 1 {
					missing(r, "claimed run %d queued again at attempt %d", run.ID, run.Attempt)
				}
			}
		}
	}
	return lost
}

// gapOf is the longest time without a successful write within [from, to), counted from from.
func gapOf(history []record, from, to time.Time) time.Duration {
	var ends []time.Time
	for _, r := range history {
		if r.write() && r.ok() && !r.End.Before(from) && r.End.Before(to) {
			ends = append(ends, r.End)
		}
	}
	sort.Slice(ends, func(i, j int) bool { return ends[i].Before(ends[j]) })
	gap, last := time.Duration(0), from
	for _, e := range ends {
		gap = max(gap, e.Sub(last))
		last = e
	}
	return max(gap, to.Sub(last))
}

// leasedTwice lists runs that two claims (answered 200, under different Idempotency-Keys)
// handed out at the same attempt, though no release came between them.
func leasedTwice(history []record, from, to time.Time) []string {
	type lease struct {
		key string
		at  time.Time
	}
	seen := map[[2]int64]lease{}
	var twice []string
	sorted := append([]record(nil), history...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].End.Before(sorted[j].End) })
	for _, r := range sorted {
		if m := releasePath.FindStringSubmatch(r.Path); m != nil && r.ok() {
			var id int64
			fmt.Sscan(m[1], &id)
			for k := range seen {
				if k[0] == id {
					delete(seen, k)
				}
			}
			continue
		}
		if r.Path != "/api/v1/runs/claim" || !r.ok() {
			continue
		}
		var claim struct {
			Runs []runAnswer `json:"runs"`
		}
		_ = json.Unmarshal(r.Body, &claim)
		for _, run := range claim.Runs {
			k := [2]int64{run.ID, int64(run.Attempt)}
			if prev, ok := seen[k]; ok && (prev.key == "" || prev.key != r.Key) && !r.End.Before(from) && r.End.Before(to) {
				twice = append(twice, fmt.Sprintf("run %d attempt %d (claims at %s and %s)", run.ID, run.Attempt,
					prev.at.Format("15:04:05.000"), r.End.Format("15:04:05.000")))
			}
			seen[k] = lease{key: r.Key, at: r.End}
		}
	}
	return twice
}
