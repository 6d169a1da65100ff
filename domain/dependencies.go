package domain

import (
	"errors"
	"fmt"
	"strings"
)

// DependencyMapping says which runs of an upstream DAG a run of its downstream waits for
// (contract: "Backfilling a pipeline").
type DependencyMapping string

const (
	// MappingOverlap: the upstream's runs whose data interval overlaps the run's own (widened
	// by its lookback): the same slot on one schedule, the day's hours for a daily roll-up of
	// an hourly DAG, the day around an hour for a fan-out.
	MappingOverlap DependencyMapping = "overlap"
	// MappingAll: every run of the upstream in the group.
	MappingAll DependencyMapping = "all"
)

// Bounds of a DAG's dependencies (api/openapi.yaml says the same; the database checks the
// lookback too).
const (
	MaxUpstreams = 50
	MaxLookback  = 1000
)

// Upstream is one DAG a DAG depends on.
type Upstream struct {
	DagID    string            `json:"dag_id"`
	Mapping  DependencyMapping `json:"mapping"`
	Lookback int               `json:"lookback"`
}

// ErrDependencyCycle is the error of a dependency that would close a cycle
// (DependencyCycleError names it).
var ErrDependencyCycle = errors.New("dependency cycle")

// DependencyCycleError names the cycle a DAG's upstreams would close: Path[0] depends on
// Path[1], which depends on Path[2], and so on back to Path[0].
type DependencyCycleError struct{ Path []string }

func (e *DependencyCycleError) Error() string {
	return fmt.Sprintf("the upstreams would close a dependency cycle: %s (each depends on the next)",
		strings.Join(e.Path, " → "))
}

func (e *DependencyCycleError) Is(target error) bool { return target == ErrDependencyCycle }

// ValidateUpstreams checks what can be checked of dagID's upstreams without the database: a
// DAG named twice is invalid_dag, and one that names itself is the shortest cycle.
func ValidateUpstreams(dagID string, ups []Upstream) error {
	if len(ups) > MaxUpstreams {
		return fmt.Errorf("%w: at most %d upstreams, got %d", ErrInvalidDag, MaxUpstreams, len(ups))
	}
	seen := make(map[string]bool, len(ups))
	for _, u := range ups {
		if u.DagID == dagID {
			return &DependencyCycleError{Path: []string{dagID, dagID}}
		}
		if seen[u.DagID] {
			return fmt.Errorf("%w: upstream %q is listed twice", ErrInvalidDag, u.DagID)
		}
		seen[u.DagID] = true
		if u.Mapping != MappingOverlap && u.Mapping != MappingAll {
			return fmt.Errorf("%w: upstream %q: mapping must be overlap or all", ErrInvalidDag, u.DagID)
		}
		if u.Lookback < 0 || u.Lookback > MaxLookback {
			return fmt.Errorf("%w: upstream %q: lookback must be 0..%d", ErrInvalidDag, u.DagID, MaxLookback)
		}
	}
	return nil
}
