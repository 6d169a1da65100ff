package handlers

import (
	"fmt"
	"net/http"
	"time"
	"unicode/utf8"

	"github.com/backfillsvc/backfill/api"
	"github.com/backfillsvc/backfill/domain"
)

// actorHeader is the header that names who sends a request.
const actorHeader = "X-Actor"

// actor is the principal a creation records as created_by. The service has no per-user
// identity: API_TOKEN's tokens are shared secrets (several only so that they can be rotated),
// so the principal is what the X-Actor header says, validated; nil without one.
func (s *Server) actor(r *http.Request) (*string, *api.Problem) {
	v := r.Header.Get(actorHeader)
	if v == "" {
		return nil, nil
	}
	if utf8.RuneCountInString(v) > domain.MaxActorLen || !domain.Printable(v, true) {
		p := badRequest("X-Actor must be 1-200 printable characters",
			fieldErr(actorHeader, "must be 1-200 printable characters"))
		return nil, &p
	}
	return &v, nil
}

// checkCodeRef answers the 422 of a code_ref that cannot be handed to programs as it is.
func checkCodeRef(ref *string) *api.Problem {
	if ref == nil {
		return nil
	}
	if err := domain.ValidateCodeRef(*ref); err != nil {
		p := problem(http.StatusUnprocessableEntity, "invalid_code_ref", err.Error())
		return &p
	}
	return nil
}

// addLogicalDates adds the chosen dates to the timestamps a request checks, each named by its
// place in the list.
func addLogicalDates(stamps map[string]time.Time, dates []time.Time) {
	for i, d := range dates {
		stamps[fmt.Sprintf("logical_dates[%d]", i)] = d
	}
}

// derefDates is the chosen dates, nil when none were given.
func derefDates(dates *[]time.Time) []time.Time {
	if dates == nil {
		return nil
	}
	return *dates
}

// valueOr is a log attribute's value: the string, or "" for none.
func valueOr(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
