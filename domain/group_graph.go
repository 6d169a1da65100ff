package domain

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// IncludeDownstream says which DAGs downstream of a group's targets join it.
type IncludeDownstream string

const (
	IncludeNone   IncludeDownstream = "none"
	IncludeDirect IncludeDownstream = "direct"
	IncludeAll    IncludeDownstream = "all"
)

// Bounds of a group (api/openapi.yaml says the same).
const (
	MaxGroupTargets = 50
	// DefaultMaxRunDependencies is MAX_RUN_DEPENDENCIES when unset.
	DefaultMaxRunDependencies = 1_000_000
)

// ErrTooManyDependencies is the error of a group whose plan holds more run-to-run
// dependencies than MAX_RUN_DEPENDENCIES (TooManyDependenciesError says how many).
var ErrTooManyDependencies = errors.New("too many dependencies")

// TooManyDependenciesError says how many dependencies the plan holds, and the cap.
type TooManyDependenciesError struct{ Count, Max int64 }

func (e *TooManyDependenciesError) Error() string {
	return fmt.Sprintf("the group's runs would have %d dependencies, more than MAX_RUN_DEPENDENCIES (%d)", e.Count, e.Max)
}

func (e *TooManyDependenciesError) Is(target error) bool { return target == ErrTooManyDependencies }

// DagNode is one DAG of the dependency graph as a group reads it.
type DagNode struct {
	DagID         string
	Upstreams     []Upstream
	DependsOnPast bool
}

// Hop is one declared dependency followed from a DAG to its upstream.
type Hop struct {
	From string // the DAG whose dependency this is
	Upstream
}

// Link is a path of dependencies from a member to the nearest member upstream along it:
// Hops[0] is the member's own dependency, and every DAG between is outside the group.
type Link struct {
	Ancestor string
	Hops     []Hop
}

// MemberLinks answers, for each member, its links to the members it waits for (through DAGs
// outside the group, the nearest member along each path), and each member's depth: 0 for a
// member with no link, else one more than its deepest ancestor's. nodes holds every DAG
// upstream of a member (members included).
func MemberLinks(members []string, nodes map[string]DagNode) (map[string][]Link, map[string]int, error) {
	isMember := make(map[string]bool, len(members))
	for _, m := range members {
		isMember[m] = true
	}
	links := make(map[string][]Link, len(members))
	for _, m := range members {
		var walk func(dag string, hops []Hop, seen []string) error
		walk = func(dag string, hops []Hop, seen []string) error {
			node, ok := nodes[dag]
			if !ok {
				return fmt.Errorf("the dependency graph read names %q, which it does not hold", dag)
			}
			for _, u := range node.Upstreams {
				if slices.Contains(seen, u.DagID) {
					return &DependencyCycleError{Path: append(slices.Clone(seen), u.DagID)}
				}
				path := append(slices.Clone(hops), Hop{From: dag, Upstream: u})
				if isMember[u.DagID] {
					links[m] = append(links[m], Link{Ancestor: u.DagID, Hops: path})
					continue
				}
				if err := walk(u.DagID, path, append(slices.Clone(seen), u.DagID)); err != nil {
					return err
				}
			}
			return nil
		}
		if err := walk(m, nil, []string{m}); err != nil {
			return nil, nil, err
		}
	}
	depth := make(map[string]int, len(members))
	var depthOf func(m string, seen []string) (int, error)
	depthOf = func(m string, seen []string) (int, error) {
		if d, ok := depth[m]; ok {
			return d, nil
		}
		d := 0
		for _, l := range links[m] {
			if slices.Contains(seen, l.Ancestor) {
				return 0, &DependencyCycleError{Path: append(slices.Clone(seen), l.Ancestor)}
			}
			ad, err := depthOf(l.Ancestor, append(slices.Clone(seen), l.Ancestor))
			if err != nil {
				return 0, err
			}
			d = max(d, ad+1)
		}
		depth[m] = d
		return d, nil
	}
	for _, m := range members {
		if _, err := depthOf(m, []string{m}); err != nil {
			return nil, nil, err
		}
	}
	return links, depth, nil
}

// String shows a link as the path it follows.
func (l Link) String() string {
	parts := make([]string, 0, len(l.Hops)+1)
	for _, h := range l.Hops {
		parts = append(parts, h.From)
	}
	return strings.Join(append(parts, l.Ancestor), " → ")
}
