package repo

import (
	"strings"

	"github.com/backfillsvc/backfill/domain"
)

// activeStatesSQL is the list of active backfill states as SQL, ('running', 'paused',
// 'canceling'), built once from domain.ActiveBackfillStates: every statement about active
// backfills says `state IN `+activeStatesSQL, so that Go and SQL cannot disagree, and the
// planner still sees a literal that implies the partial indexes' predicate
// (TestActiveStatesMatchSchema and TestActiveStatesSQLUsesPartialIndexes check both).
var activeStatesSQL = sqlListOf(domain.ActiveBackfillStates)

// sqlListOf writes states as an SQL list literal for `state IN ` predicates. A literal rather
// than an array parameter, so that the planner can match the predicate to the partial indexes
// whatever the plan cache does. The states are constants of package domain, never input, so
// quoting them is safe.
func sqlListOf(states []domain.BackfillState) string {
	quoted := make([]string, len(states))
	for i, s := range states {
		quoted[i] = "'" + string(s) + "'"
	}
	return "(" + strings.Join(quoted, ", ") + ")"
}
