package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/backfillsvc/backfill/internal/testkit/invariants"
	"github.com/stretchr/testify/require"
)

// The checking half of the history checker: the recorded history against the database at
// the end. A direct set comparison serves here (each change is named by its key, each lease by
// its run and worker), so no linearizability search is needed.

// installLeaseAudit records, in the test database, every lease a run gets: the run, the
// worker and the attempt, at the commit of the claim that made it (rolled back with it).
func installLeaseAudit(t testing.TB, e *env) {
	t.Helper()
	_, err := e.DB.Exec(`
		CREATE TABLE history_leases (run_id bigint, worker_id text, attempt int);
		CREATE FUNCTION history_lease() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			INSERT INTO history_leases VALUES (NEW.id, NEW.worker_id, NEW.attempt);
			RETURN NULL;
		END $$;
		CREATE TRIGGER history_lease AFTER UPDATE ON dag_runs FOR EACH ROW
			WHEN (NEW.state = 'running' AND OLD.state <> 'running')
			EXECUTE FUNCTION history_lease();`)
	require.NoError(t, err)
}

// historyFigures is what the check counted, for the test's log and docs/RELIABILITY.md.
type historyFigures struct {
	Requests  int // HTTP exchanges, retries included
	Unknown   int // of which answered 503 or not at all
	Keys      int // keyed creating requests (claims, backfills, runs, webhooks)
	Retried   int // keys whose first answer was unknown and that were sent again
	EndedOnce int // of those, the ones that then got a 2xx and whose change is there once
	Leases    int
	Execs     int
	Violations
}

// Violations are broken promises, by kind.
type Violations struct {
	DoubleEffects []string // a change applied more than once
	Missing       []string // a 2xx change that is not there, or not as answered
	FalseDetails  []string // a definitive refusal (4xx) of a change that was applied
	Unhanded      []string // a lease that no answer handed to its worker
	Overlaps      []string // a run executed twice at once
	Final         []string // what the database shows at the end
}

func (v Violations) all() []string {
	var out []string
	for _, l := range [][]string{v.DoubleEffects, v.Missing, v.FalseDetails, v.Unhanded, v.Overlaps, v.Final} {
		out = append(out, l...)
	}
	return out
}

var manualRunPath = regexp.MustCompile(`^/api/v1/dags/[^/]+/runs$`)

// createKind names the creating POST an exchange is, "" for others.
func createKind(x exchange) string {
	if x.Method != "POST" {
		return ""
	}
	switch {
	case x.Path == "/api/v1/backfills":
		return "backfill"
	case x.Path == "/api/v1/webhooks":
		return "webhook"
	case x.Path == claimPath:
		return "claim"
	case manualRunPath.MatchString(x.Path):
		return "dag_run"
	}
	return ""
}

// answered is what a 2xx answer of a creating POST names.
type answered struct {
	ID     int64  `json:"id"`
	Secret string `json:"secret"`
	Runs   []struct {
		ID int64 `json:"id"`
	} `json:"runs"`
}

// checkHistory compares the history with the database.
func checkHistory(t testing.TB, e *env, hist []exchange, execs []execution) historyFigures {
	t.Helper()
	f := historyFigures{Requests: len(hist), Execs: len(execs)}
	groups := map[string][]exchange{}
	handed := map[string]map[int64]bool{} // worker → runs answered to it
	for _, x := range hist {
		if x.unknown() {
			f.Unknown++
		}
		kind := createKind(x)
		if kind == "" || x.Key == "" {
			continue
		}
		groups[kind+" "+x.Key] = append(groups[kind+" "+x.Key], x)
		if kind == "claim" && x.ok() {
			var req struct {
				WorkerID string `json:"worker_id"`
			}
			var a answered
			require.NoError(t, json.Unmarshal(x.ReqBody, &req))
			require.NoError(t, json.Unmarshal(x.RespBody, &a), "%s", x.RespBody)
			if handed[req.WorkerID] == nil {
				handed[req.WorkerID] = map[int64]bool{}
			}
			for _, r := range a.Runs {
				handed[req.WorkerID][r.ID] = true
			}
		}
	}
	f.Keys = len(groups)
	names := make([]string, 0, len(groups))
	for k := range groups {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, name := range names {
		checkKeyGroup(t, e, name, groups[name], &f)
	}
	checkLeases(t, e, handed, execs, &f)
	checkFinal(t, e, &f)
	return f
}

// checkKeyGroup checks the exchanges of one key: the change is in the database at most once,
// exactly once and as answered when any answer was a 2xx, and not at all when the last
// answer refused it.
func checkKeyGroup(t testing.TB, e *env, name string, xs []exchange, f *historyFigures) {
	t.Helper()
	sort.Slice(xs, func(i, j int) bool { return xs[i].Start.Before(xs[j].Start) })
	kind, key, _ := strings.Cut(name, " ")
	if len(xs) > 1 && xs[0].unknown() {
		f.Retried++
	}
	var oks []answered
	for _, x := range xs {
		if x.ok() {
			var a answered
			require.NoError(t, json.Unmarshal(x.RespBody, &a), "%s", x.RespBody)
			oks = append(oks, a)
		}
	}
	last := xs[len(xs)-1]
	refused := !last.ok() && !last.unknown()
	if kind == "claim" {
		// A claim's runs are checked lease by lease (checkLeases); a refused claim claimed
		// nothing, which the leases show too.
		if len(oks) > 0 && xs[0].unknown() {
			f.EndedOnce++
		}
		return
	}
	var rows []struct {
		ID     int64  `db:"id"`
		Secret string `db:"secret"`
	}
	var q string
	switch kind {
	case "backfill":
		q = `SELECT id, '' AS secret FROM backfills WHERE description = $1`
	case "webhook":
		q = `SELECT id, secret FROM webhooks WHERE description = $1`
	case "dag_run":
		q = `SELECT id, '' AS secret FROM dag_runs WHERE conf->>'k' = $1`
	}
	require.NoError(t, e.DB.Select(&rows, q, key))
	what := fmt.Sprintf("%s %q (%d requests, last %d %s)", kind, key, len(xs), last.Status, last.RespBody)
	switch {
	case len(rows) > 1:
		f.DoubleEffects = append(f.DoubleEffects, fmt.Sprintf("%s: %d in the database", what, len(rows)))
	case len(oks) > 0 && len(rows) == 0:
		f.Missing = append(f.Missing, what+": answered 2xx, not in the database")
	case refused && len(rows) == 1:
		f.FalseDetails = append(f.FalseDetails, what+": refused, yet in the database")
	}
	for _, a := range oks {
		if len(rows) == 1 && (a.ID != rows[0].ID || a.Secret != rows[0].Secret) {
			f.Missing = append(f.Missing, fmt.Sprintf("%s: answered id %d, database has %d (or another secret)", what, a.ID, rows[0].ID))
		}
	}
	if len(oks) > 0 && xs[0].unknown() && len(rows) == 1 {
		f.EndedOnce++
	}
}

// checkLeases: every lease in the audit was handed to its worker by a claim's answer (the
// first or a retry with its key), and no run was executed by two work functions at once.
func checkLeases(t testing.TB, e *env, handed map[string]map[int64]bool, execs []execution, f *historyFigures) {
	t.Helper()
	var leases []struct {
		RunID   int64  `db:"run_id"`
		Worker  string `db:"worker_id"`
		Attempt int    `db:"attempt"`
	}
	require.NoError(t, e.DB.Select(&leases, `SELECT run_id, worker_id, attempt FROM history_leases`))
	f.Leases = len(leases)
	leased := map[string]bool{}
	for _, l := range leases {
		leased[fmt.Sprint(l.RunID, l.Worker)] = true
		if !handed[l.Worker][l.RunID] {
			f.Unhanded = append(f.Unhanded, fmt.Sprintf("run %d leased to %s (attempt %d) by no answer to it", l.RunID, l.Worker, l.Attempt))
		}
	}
	byRun := map[int64][]execution{}
	for _, x := range execs {
		byRun[x.RunID] = append(byRun[x.RunID], x)
		if !leased[fmt.Sprint(x.RunID, x.Worker)] {
			f.Unhanded = append(f.Unhanded, fmt.Sprintf("run %d executed by %s without a lease", x.RunID, x.Worker))
		}
	}
	for id, xs := range byRun {
		sort.Slice(xs, func(i, j int) bool { return xs[i].Start.Before(xs[j].Start) })
		for i := 1; i < len(xs); i++ {
			if xs[i].Start.Before(xs[i-1].End) {
				f.Overlaps = append(f.Overlaps, fmt.Sprintf("run %d executed by %s and %s at once", id, xs[i-1].Worker, xs[i].Worker))
			}
		}
	}
}

// checkFinal: everything ran to its end, no lease had to expire (a run leased to nobody who
// knew would have), and the database's own invariants hold.
func checkFinal(t testing.TB, e *env, f *historyFigures) {
	t.Helper()
	if n := e.Count(`SELECT count(*) FROM dag_runs WHERE state IN ('queued', 'running')`); n > 0 {
		f.Final = append(f.Final, fmt.Sprintf("%d runs unfinished at the end", n))
	}
	if n := e.Count(`SELECT count(*) FROM dag_runs WHERE attempt > 1`); n > 0 {
		f.Final = append(f.Final, fmt.Sprintf("%d runs whose lease expired", n))
	}
	rep, err := invariants.Check(context.Background(), e.DB)
	require.NoError(t, err)
	f.Final = append(f.Final, rep.Violations...)
}
