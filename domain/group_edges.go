package domain

import (
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/backfillsvc/backfill/schedule"
)

// GroupMemberPlan is what the dependencies of a group's runs are computed from, for one member.
type GroupMemberPlan struct {
	DagID string
	// Slots is the member's plan, settled: each slot's action decided against the runs that
	// exist.
	Slots []PlannedSlot
	// InFlight is the DAG's runs queued or running outside any backfill (the group's runs may
	// wait for them: they will produce their slot), ascending.
	InFlight []Span
	// DependsOnPast makes each of the member's runs wait for its previous slot in the group.
	DependsOnPast bool
}

// GroupEdges are a group's run-to-run dependencies as parallel arrays: the run of member
// Child[i] for ChildDate[i] waits for the run of member Up[i] for UpDate[i] (members are
// indexes into the plan's members; a run is named by its DAG and logical date).
type GroupEdges struct {
	Child, Up         []int32
	ChildDate, UpDate []time.Time
}

// Len is the number of dependencies.
func (e GroupEdges) Len() int { return len(e.Child) }

// GroupDependencies is what PlanGroupEdges answers.
type GroupDependencies struct {
	Edges GroupEdges
	// Blocked counts, per member, the runs that wait for at least one other at the start.
	Blocked []int
}

// producer is a run a group's run may wait for: a member's slot to be run, or a run in flight
// outside the group (Member false).
type producer struct {
	Span
	Member bool
}

// GroupGraph is what following the links needs: every DAG's schedule along them, the group's
// window, and the database's now.
type GroupGraph struct {
	Schedules map[string]*schedule.Schedule
	From, To  time.Time
	Now       time.Time
}

// PlanGroupEdges computes the dependencies of a group's runs: for each run a member will run
// (created or reprocessed), the runs of the members its links lead to whose data intervals
// overlap its own widened by each lookback, composed through the DAGs outside the group along
// the way (every run of the ancestor in the group, for a link with an "all" mapping), and its
// previous slot for a member that depends on its past. A dependency is made only to a run the
// group will run or one in flight outside it: a slot that already succeeded, and is not run
// again, satisfies it. More than maxEdges is a *TooManyDependenciesError, counted without
// holding them.
func PlanGroupEdges(members []GroupMemberPlan, links map[string][]Link, g GroupGraph, maxEdges int64) (GroupDependencies, error) {
	p := newEdgePlanner(members, g)
	out := GroupDependencies{Blocked: make([]int, len(members))}
	var total int64
	for mi, m := range members {
		prev := previousSlots(m)
		for _, sl := range m.Slots {
			if sl.Action == ActionSkip {
				continue
			}
			ups, err := p.upstreamsOf(m.DagID, Span{sl.LogicalDate, sl.IntervalEnd}, links[m.DagID])
			if err != nil {
				return GroupDependencies{}, err
			}
			if pd, ok := prev[sl.LogicalDate.UnixMicro()]; ok && m.DependsOnPast {
				ups = append(ups, upRef{member: mi, date: pd})
			}
			if len(ups) == 0 {
				continue
			}
			out.Blocked[mi]++
			total += int64(len(ups))
			if total > maxEdges {
				continue // counted, not held
			}
			for _, u := range ups {
				e := &out.Edges
				e.Child, e.ChildDate = append(e.Child, int32(mi)), append(e.ChildDate, sl.LogicalDate)
				e.Up, e.UpDate = append(e.Up, int32(u.member)), append(e.UpDate, u.date)
			}
		}
	}
	if total > maxEdges {
		return GroupDependencies{}, &TooManyDependenciesError{Count: total, Max: maxEdges}
	}
	return out, nil
}

// WaitsOnUpstreams answers, for each slot of member mi (in its Slots' order), how many runs of
// the members upstream of it the slot's run waits for: what its run is written with
// (PlannedSlot.BlockedBy), before its own plan is settled. The members before mi must be
// settled; mi's own slots and the members after it are not read. A member's wait for its own
// past is not counted: that needs its settled plan (PlanGroupEdges counts it).
func WaitsOnUpstreams(members []GroupMemberPlan, mi int, links map[string][]Link, g GroupGraph) ([]int, error) {
	p := newEdgePlanner(members[:mi], g)
	for _, l := range links[members[mi].DagID] {
		if _, ok := p.index[l.Ancestor]; !ok {
			return nil, fmt.Errorf("%s waits for %s, which is not planned before it", members[mi].DagID, l.Ancestor)
		}
	}
	waits := make([]int, len(members[mi].Slots))
	for k, sl := range members[mi].Slots {
		if sl.Action == ActionSkip {
			continue
		}
		ups, err := p.upstreamsOf(members[mi].DagID, Span{sl.LogicalDate, sl.IntervalEnd}, links[members[mi].DagID])
		if err != nil {
			return nil, err
		}
		waits[k] = len(ups)
	}
	return waits, nil
}

// upRef names a run a dependency is made to.
type upRef struct {
	member int
	date   time.Time
}

type edgePlanner struct {
	graph     GroupGraph
	lines     map[string]*tickLine
	index     map[string]int // member index by dag_id
	producers [][]producer   // per member, by Start
	// memberOnly is, per member, the indexes into producers of its own slots (an "all"
	// mapping waits for those only).
	memberOnly [][]int
}

func newEdgePlanner(members []GroupMemberPlan, g GroupGraph) *edgePlanner {
	p := &edgePlanner{graph: g, lines: map[string]*tickLine{}, index: map[string]int{}}
	p.producers = make([][]producer, len(members))
	p.memberOnly = make([][]int, len(members))
	for i, m := range members {
		p.index[m.DagID] = i
		p.producers[i], p.memberOnly[i] = producersOf(m)
	}
	return p
}

// producersOf lists a member's producers by start, and which of them are its slots.
func producersOf(m GroupMemberPlan) ([]producer, []int) {
	ps := make([]producer, 0, len(m.Slots)+len(m.InFlight))
	for _, sl := range m.Slots {
		if sl.Action != ActionSkip {
			ps = append(ps, producer{Span: Span{sl.LogicalDate, sl.IntervalEnd}, Member: true})
		}
	}
	for _, f := range m.InFlight {
		ps = append(ps, producer{Span: f})
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i].Start.Before(ps[j].Start) })
	var own []int
	for i, pr := range ps {
		if pr.Member {
			own = append(own, i)
		}
	}
	return ps, own
}

// previousSlots maps each slot's date (Unix microseconds) to the date of the slot before it in
// time, for the slots whose previous slot will have a run to wait for: one the group runs, or
// one in flight.
func previousSlots(m GroupMemberPlan) map[int64]time.Time {
	if !m.DependsOnPast {
		return nil
	}
	sorted := slices.Clone(m.Slots)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].LogicalDate.Before(sorted[j].LogicalDate) })
	prev := make(map[int64]time.Time, len(sorted))
	for i := 1; i < len(sorted); i++ {
		p := sorted[i-1]
		inFlight := p.ExceptionReason != nil && *p.ExceptionReason == ReasonInFlight
		if p.Action != ActionSkip || inFlight {
			prev[sorted[i].LogicalDate.UnixMicro()] = p.LogicalDate
		}
	}
	return prev
}

// upstreamsOf answers the runs a run of dagID with data interval span waits for through
// its links, each once.
func (p *edgePlanner) upstreamsOf(dagID string, span Span, links []Link) ([]upRef, error) {
	var ups []upRef
	for _, l := range links {
		a := p.index[l.Ancestor]
		w, all, ok, err := p.follow(dagID, span, l)
		if err != nil {
			return nil, err
		}
		switch {
		case !ok:
		case all:
			for _, k := range p.memberOnly[a] {
				ups = append(ups, upRef{member: a, date: p.producers[a][k].Start})
			}
		default:
			ps := p.producers[a]
			i := sort.Search(len(ps), func(i int) bool { return ps[i].End.After(w.Start) })
			for ; i < len(ps) && ps[i].Start.Before(w.End); i++ {
				ups = append(ups, upRef{member: a, date: ps[i].Start})
			}
		}
	}
	if len(links) > 1 {
		// Two paths may lead to the same runs (a diamond through DAGs outside the group).
		sort.Slice(ups, func(i, j int) bool {
			if ups[i].member != ups[j].member {
				return ups[i].member < ups[j].member
			}
			return ups[i].date.Before(ups[j].date)
		})
		ups = slices.CompactFunc(ups, func(a, b upRef) bool { return a.member == b.member && a.date.Equal(b.date) })
	}
	return ups, nil
}

// follow composes a link's mappings from a run's data interval: each hop widens the window by
// its lookback (in the intervals of the DAG it starts from), and a DAG outside the group in
// between turns the window into the span of its ticks that overlap it, which its own hop then
// widens. It answers the window on the ancestor, or all when a hop maps "all"; ok is false
// when a DAG in between has no tick in the window (nothing to wait for along this path).
func (p *edgePlanner) follow(dagID string, span Span, l Link) (w Span, all, ok bool, err error) {
	cur, from := span, dagID
	for k, h := range l.Hops {
		if h.Mapping == MappingAll {
			return Span{}, true, true, nil
		}
		line, err := p.line(from)
		if err != nil {
			return Span{}, false, false, err
		}
		if cur.Start, err = line.back(cur.Start, h.Lookback); err != nil {
			return Span{}, false, false, err
		}
		if k == len(l.Hops)-1 {
			break
		}
		next, err := p.line(h.DagID)
		if err != nil {
			return Span{}, false, false, err
		}
		var found bool
		if cur, found, err = next.hull(cur); err != nil || !found {
			return Span{}, false, false, err
		}
		from = h.DagID
	}
	return cur, false, true, nil
}

// line answers the tick line of a DAG's schedule, made on first use over the group's window.
func (p *edgePlanner) line(dagID string) (*tickLine, error) {
	if l, ok := p.lines[dagID]; ok {
		return l, nil
	}
	sched, ok := p.graph.Schedules[dagID]
	if !ok {
		return nil, fmt.Errorf("no schedule read for %q", dagID)
	}
	l, err := newTickLine(sched, p.graph.From, p.graph.To, p.graph.Now)
	if err != nil {
		return nil, err
	}
	p.lines[dagID] = l
	return l, nil
}
