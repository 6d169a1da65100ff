package domain

import (
	"errors"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/schedule"
)

func mustSched(t *testing.T, expr string) *schedule.Schedule {
	t.Helper()
	s, err := schedule.Parse(expr, "UTC")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// memberPlan plans every tick of expr in [from, to] to be created.
func memberPlan(t *testing.T, dag, expr string, from, to, now time.Time) GroupMemberPlan {
	t.Helper()
	slots, err := PlanSlots(expr, "UTC", BackfillRequest{DagID: dag, FromDate: from, ToDate: to}, now, 100000)
	if err != nil {
		t.Fatal(err)
	}
	return GroupMemberPlan{DagID: dag, Slots: slots}
}

var (
	day0 = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	now  = time.Date(2024, 6, 1, 0, 0, 0, 0, time.UTC)
)

// waitsFor lists, for the run of member child at date, the (member, date) pairs it waits for.
func waitsFor(e GroupEdges, child int, date time.Time) map[[2]int64]bool {
	out := map[[2]int64]bool{}
	for i := range e.Child {
		if int(e.Child[i]) == child && e.ChildDate[i].Equal(date) {
			out[[2]int64{int64(e.Up[i]), e.UpDate[i].Unix()}] = true
		}
	}
	return out
}

func TestHourlyToDailyRollUpWaitsForTheDaysHours(t *testing.T) {
	nodes := map[string]DagNode{
		"hourly": {DagID: "hourly"},
		"daily":  {DagID: "daily", Upstreams: []Upstream{{DagID: "hourly", Mapping: MappingOverlap}}},
	}
	links, depth, err := MemberLinks([]string{"daily", "hourly"}, nodes)
	if err != nil {
		t.Fatal(err)
	}
	if depth["hourly"] != 0 || depth["daily"] != 1 {
		t.Fatalf("depths %v", depth)
	}
	to := day0.Add(47 * time.Hour)
	members := []GroupMemberPlan{memberPlan(t, "hourly", "@hourly", day0, to, now), memberPlan(t, "daily", "@daily", day0, to, now)}
	deps, err := PlanGroupEdges(members, links, GroupGraph{
		Schedules: map[string]*schedule.Schedule{"hourly": mustSched(t, "@hourly"), "daily": mustSched(t, "@daily")},
		From:      day0, To: to, Now: now,
	}, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if deps.Edges.Len() != 48 || deps.Blocked[1] != 2 || deps.Blocked[0] != 0 {
		t.Fatalf("edges %d blocked %v, want 48 and [0 2]", deps.Edges.Len(), deps.Blocked)
	}
	got := waitsFor(deps.Edges, 1, day0.Add(24*time.Hour))
	for h := 24; h < 48; h++ {
		if !got[[2]int64{0, day0.Add(time.Duration(h) * time.Hour).Unix()}] {
			t.Fatalf("the second day does not wait for hour %d: %v", h, got)
		}
	}
}

func TestDailyToHourlyFanOutWaitsForTheDayAroundEachHour(t *testing.T) {
	nodes := map[string]DagNode{
		"daily":  {DagID: "daily"},
		"hourly": {DagID: "hourly", Upstreams: []Upstream{{DagID: "daily", Mapping: MappingOverlap}}},
	}
	links, _, err := MemberLinks([]string{"daily", "hourly"}, nodes)
	if err != nil {
		t.Fatal(err)
	}
	to := day0.Add(47 * time.Hour)
	members := []GroupMemberPlan{memberPlan(t, "daily", "@daily", day0, to, now), memberPlan(t, "hourly", "@hourly", day0, to, now)}
	deps, err := PlanGroupEdges(members, links, GroupGraph{
		Schedules: map[string]*schedule.Schedule{"hourly": mustSched(t, "@hourly"), "daily": mustSched(t, "@daily")},
		From:      day0, To: to, Now: now,
	}, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if deps.Edges.Len() != 48 {
		t.Fatalf("edges %d, want one per hour", deps.Edges.Len())
	}
	got := waitsFor(deps.Edges, 1, day0.Add(30*time.Hour))
	if len(got) != 1 || !got[[2]int64{0, day0.Add(24 * time.Hour).Unix()}] {
		t.Fatalf("hour 30 waits for %v, want the second day", got)
	}
}

func TestALookbackWaitsForThePastIntervalsToo(t *testing.T) {
	nodes := map[string]DagNode{
		"up":   {DagID: "up"},
		"roll": {DagID: "roll", Upstreams: []Upstream{{DagID: "up", Mapping: MappingOverlap, Lookback: 2}}},
	}
	links, _, _ := MemberLinks([]string{"roll", "up"}, nodes)
	to := day0.AddDate(0, 0, 5)
	members := []GroupMemberPlan{memberPlan(t, "up", "@daily", day0, to, now), memberPlan(t, "roll", "@daily", day0, to, now)}
	deps, err := PlanGroupEdges(members, links, GroupGraph{
		Schedules: map[string]*schedule.Schedule{"up": mustSched(t, "@daily"), "roll": mustSched(t, "@daily")},
		From:      day0, To: to, Now: now,
	}, 1000)
	if err != nil {
		t.Fatal(err)
	}
	got := waitsFor(deps.Edges, 1, day0.AddDate(0, 0, 3))
	for d := 1; d <= 3; d++ {
		if !got[[2]int64{0, day0.AddDate(0, 0, d).Unix()}] {
			t.Fatalf("day 3 with lookback 2 does not wait for day %d: %v", d, got)
		}
	}
	if len(got) != 3 {
		t.Fatalf("day 3 waits for %v, want days 1..3", got)
	}
	// The first day's lookback reaches before the window, where the group runs nothing.
	if first := waitsFor(deps.Edges, 1, day0); len(first) != 1 {
		t.Fatalf("day 0 waits for %v, want only day 0", first)
	}
}

func TestADagLeftOutInTheMiddleComposesTheMappings(t *testing.T) {
	// hourly A → daily B (not in the group) → daily C with lookback 1 on B: each C day waits
	// for the A hours of the B days it would have waited for (its own day and the one before).
	nodes := map[string]DagNode{
		"a": {DagID: "a"},
		"b": {DagID: "b", Upstreams: []Upstream{{DagID: "a", Mapping: MappingOverlap}}},
		"c": {DagID: "c", Upstreams: []Upstream{{DagID: "b", Mapping: MappingOverlap, Lookback: 1}}},
	}
	links, depth, err := MemberLinks([]string{"a", "c"}, nodes)
	if err != nil {
		t.Fatal(err)
	}
	if depth["c"] != 1 || len(links["c"]) != 1 || links["c"][0].Ancestor != "a" {
		t.Fatalf("links %v depth %v", links, depth)
	}
	to := day0.AddDate(0, 0, 3).Add(-time.Hour)
	members := []GroupMemberPlan{memberPlan(t, "a", "@hourly", day0, to, now), memberPlan(t, "c", "@daily", day0, to, now)}
	deps, err := PlanGroupEdges(members, links, GroupGraph{
		Schedules: map[string]*schedule.Schedule{"a": mustSched(t, "@hourly"), "b": mustSched(t, "@daily"), "c": mustSched(t, "@daily")},
		From:      day0, To: to, Now: now,
	}, 10000)
	if err != nil {
		t.Fatal(err)
	}
	if got := waitsFor(deps.Edges, 1, day0.AddDate(0, 0, 2)); len(got) != 48 {
		t.Fatalf("day 2 waits for %d A runs, want the 48 hours of days 1 and 2", len(got))
	}
}

func TestDependsOnPastWaitsForThePreviousSlotTheGroupRuns(t *testing.T) {
	to := day0.AddDate(0, 0, 3)
	m := memberPlan(t, "p", "@daily", day0, to, now)
	m.DependsOnPast = true
	reason := ReasonAlreadyExists
	m.Slots[1].Action, m.Slots[1].ExceptionReason = ActionSkip, &reason // day 1 succeeded already
	deps, err := PlanGroupEdges([]GroupMemberPlan{m}, nil, GroupGraph{
		Schedules: map[string]*schedule.Schedule{"p": mustSched(t, "@daily")}, From: day0, To: to, Now: now,
	}, 100)
	if err != nil {
		t.Fatal(err)
	}
	// day 1 → nothing (skipped, no run); day 2 → day 1 skipped as done: satisfied; day 3 → day 2.
	if deps.Edges.Len() != 1 || !deps.Edges.ChildDate[0].Equal(day0.AddDate(0, 0, 3)) || !deps.Edges.UpDate[0].Equal(day0.AddDate(0, 0, 2)) {
		t.Fatalf("edges %+v", deps.Edges)
	}
}

func TestTooManyDependenciesIsCountedNotHeld(t *testing.T) {
	nodes := map[string]DagNode{
		"a": {DagID: "a"},
		"b": {DagID: "b", Upstreams: []Upstream{{DagID: "a", Mapping: MappingAll}}},
	}
	links, _, _ := MemberLinks([]string{"a", "b"}, nodes)
	to := day0.AddDate(0, 0, 99)
	members := []GroupMemberPlan{memberPlan(t, "a", "@daily", day0, to, now), memberPlan(t, "b", "@daily", day0, to, now)}
	_, err := PlanGroupEdges(members, links, GroupGraph{
		Schedules: map[string]*schedule.Schedule{"a": mustSched(t, "@daily"), "b": mustSched(t, "@daily")},
		From:      day0, To: to, Now: now,
	}, 5000)
	var tm *TooManyDependenciesError
	if !errors.As(err, &tm) || tm.Count != 100*100 || tm.Max != 5000 {
		t.Fatalf("err %v, want 10000 counted over 5000", err)
	}
}

// A member's runs are written knowing what they wait for of the members above it: the same
// count PlanGroupEdges gives them, save for a wait on its own past.
func TestWaitsOnUpstreamsIsWhatTheEdgesCount(t *testing.T) {
	nodes := map[string]DagNode{
		"a":    {DagID: "a"},
		"b":    {DagID: "b", Upstreams: []Upstream{{DagID: "a", Mapping: MappingOverlap}}},
		"c":    {DagID: "c", Upstreams: []Upstream{{DagID: "a", Mapping: MappingOverlap, Lookback: 1}}},
		"sink": {DagID: "sink", Upstreams: []Upstream{{DagID: "b", Mapping: MappingOverlap}, {DagID: "c", Mapping: MappingOverlap}}, DependsOnPast: true},
	}
	order := []string{"a", "b", "c", "sink"}
	links, _, err := MemberLinks(order, nodes)
	if err != nil {
		t.Fatal(err)
	}
	to := day0.AddDate(0, 0, 4)
	g := GroupGraph{Schedules: map[string]*schedule.Schedule{}, From: day0, To: to, Now: now}
	var members []GroupMemberPlan
	for _, d := range order {
		g.Schedules[d] = mustSched(t, "@daily")
		m := memberPlan(t, d, "@daily", day0, to, now)
		m.DependsOnPast = nodes[d].DependsOnPast
		members = append(members, m)
	}
	deps, err := PlanGroupEdges(members, links, g, 1000)
	if err != nil {
		t.Fatal(err)
	}
	for mi, m := range members {
		waits, err := WaitsOnUpstreams(members, mi, links, g)
		if err != nil {
			t.Fatal(err)
		}
		for k, sl := range m.Slots {
			want := len(waitsFor(deps.Edges, mi, sl.LogicalDate))
			if m.DependsOnPast && k > 0 {
				want-- // its previous slot: counted once the plan is settled
			}
			if waits[k] != want {
				t.Fatalf("%s %s: written waiting for %d, the edges count %d", m.DagID, sl.LogicalDate, waits[k], want)
			}
		}
	}
}
