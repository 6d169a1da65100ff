package main

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"

	"github.com/backfillsvc/backfill/domain"
	"github.com/backfillsvc/backfill/repo"
)

// P11: backfill groups (contract: "Backfilling a pipeline"), three targets.
//
//	(a) creation: a chain a → b → c of hourly DAGs (overlap dependencies), N slots each, as one
//	    group in one transaction (repo BackfillGroupCreate) against the same 3 × N runs as three
//	    plain backfills (repo BackfillCreate), each side on a fresh database every round;
//	(b) claims: the CPU of a claim + report cycle through the service, on a plain backfill,
//	    with a group's 100,000 blocked runs waiting in the same database against none;
//	(c) cascade: the one report that fails an upstream run whose failure cancels 30,000
//	    dependents (the trigger dag_runs_follow_dependencies, in that statement).
//
// (a) and (c) run the repo in-process, as P3 runs the sweeper; (b) drives two service
// processes over HTTP, as P4 does.
const (
	targetGroupCreate  = 1.5             // group ≤ 1.5 × three plain backfills of the same runs
	targetBlockedClaim = 1.10            // CPU per cycle with the blocked runs ≤ 1.1 × without
	targetCascade      = 2 * time.Second // the failing report, cascade included
)

// groupSizes are P11's sizes; smoke mode shrinks each a hundredfold.
type groupSizes struct {
	slots, createRounds int // (a): slots per DAG, alternating rounds
	blocked             int // (b): blocked runs waiting
	cascade, cascadeRnd int // (c): dependents of the failing run, rounds
}

func groupSizesOf(cfg config) groupSizes {
	if cfg.smoke {
		return groupSizes{slots: 330, createRounds: 1, blocked: 1_000, cascade: 300, cascadeRnd: 1}
	}
	return groupSizes{slots: 33_000, createRounds: 5, blocked: 100_000, cascade: 30_000, cascadeRnd: 3}
}

// groupsResult is P11.
type groupsResult struct {
	sizes        groupSizes
	group, plain []time.Duration // (a), per round
	dependencies int64           // (a): the group's run-to-run dependencies
	// claims is (b): service is the side with the blocked runs, floor the side without.
	claims          cpuComparison
	cycles, clients int
	cascade         []time.Duration // (c), per round
}

func (r groupsResult) createRatios() []float64 {
	out := make([]float64, len(r.group))
	for i := range r.group {
		out[i] = float64(r.group[i]) / float64(r.plain[i])
	}
	return out
}

// scenarioGroups is P11.
func (b *bench) scenarioGroups(ctx context.Context, env *scratch) (groupsResult, error) {
	res := groupsResult{sizes: groupSizesOf(b.cfg)}
	var err error
	if err = b.groupCreateRounds(ctx, env, &res); err != nil {
		return res, fmt.Errorf("creation: %w", err)
	}
	if err = b.blockedClaims(ctx, env, &res); err != nil {
		return res, fmt.Errorf("claims: %w", err)
	}
	if err = b.cascadeRounds(ctx, env, &res); err != nil {
		return res, fmt.Errorf("cascade: %w", err)
	}
	return res, nil
}

// p11Store opens a repo.Store on dsn, as the service's is (UTC sessions), with room for a
// group of more than MAX_BACKFILL_RUNS' default (the blocked runs of (b) and their upstream).
func p11Store(dsn string) (*repo.Store, *sqlx.DB, error) {
	db, err := sqlx.Open("postgres", dsn)
	if err != nil {
		return nil, nil, err
	}
	db.SetMaxOpenConns(4)
	db.SetMaxIdleConns(4)
	return repo.New(db, repo.Config{MaxBackfillRuns: 1_000_000}), db, nil
}

// drop drops one scratch database at once (the rounds of (a) make two each, of 100k runs).
func (s *scratch) drop(ctx context.Context, dsn string) error {
	name := dbNameOf(dsn)
	if _, err := s.admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+pq.QuoteIdentifier(name)+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop scratch database %s: %w", name, err)
	}
	s.dbs = slices.DeleteFunc(s.dbs, func(n string) bool { return n == name })
	s.log.Printf("dropped %s", name)
	return nil
}

var (
	hourly  = "@hourly"
	leapDay = "0 0 29 2 *" // one tick every four years: a single-slot upstream over a long window
)

// putDag creates a DAG in UTC with the API's defaults, depending on ups.
func putDag(ctx context.Context, s *repo.Store, dagID, sched string, ups ...domain.Upstream) error {
	_, _, err := s.DagPut(ctx, repo.DagPutParams{DagID: dagID, Schedule: sched, Timezone: "UTC",
		MaxActiveRuns: 16, Upstreams: ups})
	if err != nil {
		return fmt.Errorf("put dag %s: %w", dagID, err)
	}
	return nil
}

// putChain creates the chain p_a → p_b → p_c of hourly DAGs, each depending on the one before
// it with the overlap mapping, and answers their ids.
func putChain(ctx context.Context, s *repo.Store, p string) ([]string, error) {
	ids := []string{p + "_a", p + "_b", p + "_c"}
	for i, id := range ids {
		var ups []domain.Upstream
		if i > 0 {
			ups = []domain.Upstream{{DagID: ids[i-1], Mapping: domain.MappingOverlap}}
		}
		if err := putDag(ctx, s, id, hourly, ups...); err != nil {
			return nil, err
		}
	}
	return ids, nil
}

// hourlyWindow is n hourly slots from from.
func hourlyWindow(from time.Time, n int) (time.Time, time.Time) {
	return from, from.Add(time.Duration(n-1) * time.Hour)
}

func groupRequest(targets []string, from, to time.Time) domain.GroupRequest {
	return domain.GroupRequest{DagIDs: targets, IncludeDownstream: domain.IncludeAll, FromDate: from, ToDate: to,
		ReprocessBehavior: domain.ReprocessNone, MaxActiveRuns: 10}
}

func plainRequest(dagID string, from, to time.Time, maxActive int) domain.BackfillRequest {
	return domain.BackfillRequest{DagID: dagID, FromDate: from, ToDate: to, ReprocessBehavior: domain.ReprocessNone,
		MaxActiveRuns: maxActive}
}

// groupCreateRounds is (a): rounds of the group and the three plain backfills, each on a fresh
// database of its own (dropped after), the side that goes first alternating. Each database
// first serves a small warm-up of its own path (a 10-slot group, or three 10-slot backfills,
// on other DAGs), so that neither side pays for its first connection and plans; a CHECKPOINT
// with no autovacuum running precedes each timed creation.
func (b *bench) groupCreateRounds(ctx context.Context, env *scratch, res *groupsResult) error {
	n := res.sizes.slots
	from, to := hourlyWindow(time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC), n)
	for r := range res.sizes.createRounds {
		groupFirst := r%2 == 0
		for _, groupTurn := range []bool{groupFirst, !groupFirst} {
			role := fmt.Sprintf("p11_plain_%d", r)
			if groupTurn {
				role = fmt.Sprintf("p11_group_%d", r)
			}
			dsn, err := env.create(ctx, role, true)
			if err != nil {
				return err
			}
			d, deps, err := b.groupCreateOnce(ctx, dsn, groupTurn, n, from, to)
			if derr := env.drop(ctx, dsn); err == nil {
				err = derr
			}
			if err != nil {
				return err
			}
			if groupTurn {
				res.group, res.dependencies = append(res.group, d), deps
			} else {
				res.plain = append(res.plain, d)
			}
		}
		b.log.Printf("P11 creation of 3 × %d hourly runs, round %d: one group %v, three plain backfills %v (%.2f×)", n, r+1,
			res.group[r].Round(time.Millisecond), res.plain[r].Round(time.Millisecond), res.createRatios()[r])
	}
	return nil
}

// groupCreateOnce times one side of a round of (a) on the fresh database dsn: the group (and
// the dependencies it wrote), or the sum of the three plain creations.
func (b *bench) groupCreateOnce(ctx context.Context, dsn string, group bool, n int, from, to time.Time) (time.Duration, int64, error) {
	s, db, err := p11Store(dsn)
	if err != nil {
		return 0, 0, err
	}
	defer db.Close()
	warm, err := putChain(ctx, s, "warm")
	if err != nil {
		return 0, 0, err
	}
	dags, err := putChain(ctx, s, "chain")
	if err != nil {
		return 0, 0, err
	}
	wFrom, wTo := hourlyWindow(from, 10)
	if group {
		if _, _, err := s.BackfillGroupCreate(ctx, groupRequest(warm[:1], wFrom, wTo)); err != nil {
			return 0, 0, fmt.Errorf("warm-up group: %w", err)
		}
		b.checkpoint(ctx)
		start := time.Now()
		g, _, err := s.BackfillGroupCreate(ctx, groupRequest(dags[:1], from, to))
		took := time.Since(start)
		if err != nil {
			return 0, 0, fmt.Errorf("group: %w", err)
		}
		if p := g.Progress(); len(g.Members) != 3 || p.Total() != int64(3*n) || p.Queued != int64(3*n) {
			return 0, 0, fmt.Errorf("group %d: %d members, %d runs (%d queued), want 3 and %d", g.ID, len(g.Members), p.Total(), p.Queued, 3*n)
		}
		if want := int64(2 * n); g.Dependencies != want {
			return 0, 0, fmt.Errorf("group %d: %d dependencies, want %d", g.ID, g.Dependencies, want)
		}
		return took, g.Dependencies, nil
	}
	for _, d := range warm {
		if _, _, err := s.BackfillCreate(ctx, plainRequest(d, wFrom, wTo, 10)); err != nil {
			return 0, 0, fmt.Errorf("warm-up backfill: %w", err)
		}
	}
	b.checkpoint(ctx)
	var took time.Duration
	for _, d := range dags {
		start := time.Now()
		bf, _, err := s.BackfillCreate(ctx, plainRequest(d, from, to, 10))
		took += time.Since(start)
		if err != nil {
			return 0, 0, fmt.Errorf("backfill of %s: %w", d, err)
		}
		if bf.Total() != int64(n) || bf.Queued != int64(n) {
			return 0, 0, fmt.Errorf("backfill %d of %s: %d runs (%d queued), want %d", bf.ID, d, bf.Total(), bf.Queued, n)
		}
	}
	return took, 0, nil
}

// blockedClaims is (b). Two databases, each with one plain backfill of hourly runs
// (max_active_runs 1000, so the cap never binds) that the cycles claim and report, each served
// by a service process of its own (the suite's binary). The second also holds, created before
// the plain backfill (so that its member is the older backfill, the one a claim reaches
// first), a group of up (a leap-day schedule: 3 runs over the window) and down (hourly,
// overlap), whose 3 upstream runs are claimed by a holder with an hour's lease and never
// reported: down's runs all stay blocked. Then P4's CPU measure (4 workers, claim of limit 1
// then report success over HTTP, the service's CPU and its database's backends'), rounds
// alternating between the two. Nothing is vacuumed after the group's creation: the dead index
// entries it leaves in the range a claim probes (docs/BENCHMARKS.md, P11) stay until
// autovacuum comes, as they would on a server.
func (b *bench) blockedClaims(ctx context.Context, env *scratch, res *groupsResult) error {
	// P4's measure at two thirds of its cycles a round: twelve measurements of them on two
	// shared cores are minutes.
	res.cycles, res.clients = min(b.cfg.cpuCycles, 2_000), 4
	plainRuns := res.cycles*(cpuRounds+2) + 1_000 // the warm-up, the rounds, and room
	bin := b.cfg.apiBin
	if bin == "" {
		bin = b.svc.cmd.Path // the suite's build
	}
	type side struct {
		name string
		dsn  string
		svc  *service
	}
	sides := []*side{{name: "none"}, {name: "blocked"}}
	// The services stop before their databases are dropped, here rather than at the end of
	// the run: they hold 100k runs each.
	defer func() {
		for _, sd := range sides {
			if sd.svc != nil {
				_ = sd.svc.stop()
			}
			if sd.dsn != "" {
				_ = env.drop(context.WithoutCancel(ctx), sd.dsn)
			}
		}
	}()
	for _, sd := range sides {
		var err error
		if sd.dsn, err = env.create(ctx, "p11_claims_"+sd.name, true); err != nil {
			return err
		}
		if err := b.seedClaims(ctx, sd.dsn, sd.name == "blocked", res.sizes.blocked, plainRuns); err != nil {
			return fmt.Errorf("%s: %w", sd.name, err)
		}
	}
	b.checkpoint(ctx)
	for _, sd := range sides {
		var err error
		if sd.svc, err = startService(ctx, bin, "", sd.dsn, b.log); err != nil {
			return err
		}
	}
	measure := func(sd *side) func() (cpuSample, error) {
		bb := *b
		bb.svc = sd.svc
		return func() (cpuSample, error) {
			return measureCPU(ctx, sd.svc.cmd.Process.Pid, dbNameOf(sd.dsn), res.cycles, res.clients, func(ctx context.Context, worker int) error {
				return bb.claimCycle(ctx, "p11w"+strconv.Itoa(worker))
			})
		}
	}
	var err error
	res.claims, err = b.compareCPU("P11", "cycle", measure(sides[1]), measure(sides[0]), func(c cpuComparison, i int) string {
		return fmt.Sprintf("blocked/none %.2f", c.totalRatios()[i])
	})
	if err != nil {
		return err
	}
	// The blocked runs must still be there, all of them, and every claim must have come from
	// the plain backfill.
	db, err := sql.Open("postgres", sides[1].dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	var blocked, downClaimed int
	err = db.QueryRowContext(ctx, `
		SELECT count(*) FILTER (WHERE state = 'queued' AND blocked_by > 0),
		       count(*) FILTER (WHERE state <> 'queued')
		FROM dag_runs WHERE dag_id = 'down'`).Scan(&blocked, &downClaimed)
	if err != nil {
		return err
	}
	if blocked != res.sizes.blocked || downClaimed != 0 {
		return fmt.Errorf("after the rounds down has %d blocked runs and %d not queued, want %d and 0", blocked, downClaimed, res.sizes.blocked)
	}
	return nil
}

// seedClaims writes (b)'s data to dsn through the repo: with blocked, the group first and its
// upstream runs claimed by the holder; then the plain backfill. Then ANALYZE, as P4 does.
func (b *bench) seedClaims(ctx context.Context, dsn string, blocked bool, nBlocked, plainRuns int) error {
	s, db, err := p11Store(dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	if blocked {
		start := time.Now()
		if err := putDag(ctx, s, "up", leapDay); err != nil {
			return err
		}
		if err := putDag(ctx, s, "down", hourly, domain.Upstream{DagID: "up", Mapping: domain.MappingOverlap}); err != nil {
			return err
		}
		from, to := hourlyWindow(time.Date(2000, 2, 29, 0, 0, 0, 0, time.UTC), nBlocked)
		g, _, err := s.BackfillGroupCreate(ctx, groupRequest([]string{"up"}, from, to))
		if err != nil {
			return fmt.Errorf("group: %w", err)
		}
		var ups int
		for _, m := range g.Members {
			if m.DagID == "up" {
				ups = int(m.Total())
			}
		}
		up := "up"
		held, _, err := s.RunClaim(ctx, repo.RunClaimParams{WorkerID: "p11_holder", Limit: ups, LeaseSeconds: 3 * 3600, DagID: &up})
		if err != nil {
			return fmt.Errorf("claim the upstream runs: %w", err)
		}
		if len(held) != ups || ups == 0 {
			return fmt.Errorf("claimed %d of up's %d runs", len(held), ups)
		}
		var n int
		if err := db.GetContext(ctx, &n, `SELECT count(*) FROM dag_runs WHERE dag_id = 'down' AND state = 'queued' AND blocked_by > 0`); err != nil {
			return err
		}
		if n != nBlocked {
			return fmt.Errorf("down has %d blocked runs, want %d", n, nBlocked)
		}
		b.log.Printf("P11 group of %d blocked runs behind %d running upstream runs (%d dependencies) written in %v",
			n, ups, g.Dependencies, time.Since(start).Round(time.Millisecond))
	}
	if err := putDag(ctx, s, "plain", hourly); err != nil {
		return err
	}
	from, to := hourlyWindow(time.Date(2015, 1, 1, 0, 0, 0, 0, time.UTC), plainRuns)
	if _, _, err := s.BackfillCreate(ctx, plainRequest("plain", from, to, 1000)); err != nil {
		return fmt.Errorf("plain backfill: %w", err)
	}
	if _, err := db.ExecContext(ctx, `ANALYZE`); err != nil {
		return fmt.Errorf("analyze: %w", err)
	}
	return nil
}

// cascadeRounds is (c), in one fresh database: each round a fresh pair of DAGs, up (a
// leap-day schedule, one slot in the window) and down (hourly, mapping "all" to up), as one
// group whose down runs all wait for up's one run; up's run is claimed (not timed), then the
// report that fails it is timed. It must answer failed, and leave every down run canceled with
// note "upstream_failed: up_<r> <run_id>".
func (b *bench) cascadeRounds(ctx context.Context, env *scratch, res *groupsResult) error {
	dsn, err := env.create(ctx, "p11_cascade", true)
	if err != nil {
		return err
	}
	defer env.drop(context.WithoutCancel(ctx), dsn)
	s, db, err := p11Store(dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	// Round 0 is a warm-up of 10 dependents on the same paths, not counted.
	for r := range res.sizes.cascadeRnd + 1 {
		up, down, size := fmt.Sprintf("up_%d", r), fmt.Sprintf("down_%d", r), res.sizes.cascade
		if r == 0 {
			size = 10
		}
		// up's one tick, 2020-02-29, is the window's first instant; the next is four years on.
		from, to := hourlyWindow(time.Date(2020, 2, 29, 0, 0, 0, 0, time.UTC), size)
		if err := putDag(ctx, s, up, leapDay); err != nil {
			return err
		}
		if err := putDag(ctx, s, down, hourly, domain.Upstream{DagID: up, Mapping: domain.MappingAll}); err != nil {
			return err
		}
		g, _, err := s.BackfillGroupCreate(ctx, groupRequest([]string{up}, from, to))
		if err != nil {
			return fmt.Errorf("group: %w", err)
		}
		if g.Dependencies != int64(size) {
			return fmt.Errorf("group %d: %d dependencies, want %d", g.ID, g.Dependencies, size)
		}
		held, _, err := s.RunClaim(ctx, repo.RunClaimParams{WorkerID: "p11_cascade", Limit: 1, LeaseSeconds: 600, DagID: &up})
		if err != nil {
			return err
		}
		if len(held) != 1 {
			return fmt.Errorf("claimed %d runs of %s, want 1", len(held), up)
		}
		if _, err := db.ExecContext(ctx, `ANALYZE`); err != nil {
			return fmt.Errorf("analyze: %w", err)
		}
		b.checkpoint(ctx)
		worker := "p11_cascade"
		start := time.Now()
		run, err := s.RunReport(ctx, repo.RunReportParams{DagID: up, RunID: held[0].RunID, State: domain.RunFailed, WorkerID: &worker})
		took := time.Since(start)
		if err != nil {
			return fmt.Errorf("report %s %s failed: %w", up, held[0].RunID, err)
		}
		if run.State != domain.RunFailed {
			return fmt.Errorf("report of %s %s: state %s, want failed", up, held[0].RunID, run.State)
		}
		var canceled, other int
		err = db.QueryRowContext(ctx, `
			SELECT count(*) FILTER (WHERE state = 'canceled' AND note = 'upstream_failed: ' || $2 || ' ' || $3),
			       count(*) FILTER (WHERE NOT (state = 'canceled' AND note LIKE 'upstream\_failed: %'))
			FROM dag_runs WHERE dag_id = $1`, down, up, held[0].RunID).Scan(&canceled, &other)
		if err != nil {
			return err
		}
		if canceled != size || other != 0 {
			return fmt.Errorf("after the failure of %s %s, %s has %d runs canceled upstream_failed and %d others, want %d and 0",
				up, held[0].RunID, down, canceled, other, size)
		}
		if r == 0 {
			continue
		}
		res.cascade = append(res.cascade, took)
		b.log.Printf("P11 cascade round %d: the report failing %s %s took %v and canceled %d runs of %s (upstream_failed)",
			r, up, held[0].RunID, took.Round(time.Millisecond), canceled, down)
	}
	return nil
}

func groupsRows(r groupsResult) []row {
	var rows []row
	if len(r.group) > 0 {
		ratios := r.createRatios()
		rows = append(rows, row{
			fmt.Sprintf("P11 group creation, 3 hourly DAGs a→b→c (overlap) × %s slots, one transaction (%s dependencies), vs 3 plain backfills (median of %d)",
				count(r.sizes.slots), count(int(r.dependencies)), len(r.group)),
			dur(median(r.group)), dur(median(r.plain)) + " (three)", spread(ratios),
			fmt.Sprintf("≤ %.1f", targetGroupCreate), verdict(median(ratios) <= targetGroupCreate)})
	}
	if len(r.claims.service) > 0 {
		c := r.claims
		wall := func(side []cpuSample) time.Duration {
			return c.median(side, func(s cpuSample) time.Duration { return s.elapsed / time.Duration(max(s.n, 1)) })
		}
		name := fmt.Sprintf("P11 CPU per claim + report cycle, %s blocked runs waiting vs none (%d rounds of %s, %d workers)",
			count(r.sizes.blocked), len(c.service), count(r.cycles), r.clients)
		rows = append(rows,
			row{name + ": service + PostgreSQL", cpuCell(c, c.service), cpuCell(c, c.floor) + " (none)", spread(c.totalRatios()),
				fmt.Sprintf("≤ %.2f", targetBlockedClaim), verdict(median(c.totalRatios()) <= targetBlockedClaim)},
			row{fmt.Sprintf("P11 wall time per cycle, %s blocked vs none (information)", count(r.sizes.blocked)),
				dur(wall(c.service)), dur(wall(c.floor)) + " (none)",
				ratioStr(float64(wall(c.service)) / float64(max(wall(c.floor), 1))), "—", "—"})
	}
	if len(r.cascade) > 0 {
		rows = append(rows, row{
			fmt.Sprintf("P11 cascade: the report failing one upstream run, %s dependents canceled (upstream_failed) in its statement (median of %d)",
				count(r.sizes.cascade), len(r.cascade)),
			dur(median(r.cascade)), fmt.Sprintf("rounds %s–%s", dur(slices.Min(r.cascade)), dur(slices.Max(r.cascade))), "—",
			"< " + dur(targetCascade), verdict(median(r.cascade) < targetCascade)})
	}
	return rows
}
