package handlers

import (
	"fmt"
	"net/http"

	"github.com/backfillsvc/backfill/api"
	"github.com/backfillsvc/backfill/repo"
)

// checkPriority answers the 422 of a priority outside repo.MinPriority..repo.MaxPriority. The
// spec states the range in words rather than as bounds, so that the answer is this stable
// code rather than the validator's 400.
func checkPriority(p *int) *api.Problem {
	if p == nil || (*p >= repo.MinPriority && *p <= repo.MaxPriority) {
		return nil
	}
	prob := problem(http.StatusUnprocessableEntity, "invalid_priority",
		fmt.Sprintf("priority %d is outside %d..%d", *p, repo.MinPriority, repo.MaxPriority))
	return &prob
}

// backfillWithETA is GET /backfills/{id}'s answer: the backfill and its eta_seconds, null
// included (other answers of a backfill leave the field out: it costs a read of the pace).
type backfillWithETA struct {
	api.Backfill
	EtaSeconds *float64 `json:"eta_seconds"`
}

// checkPriorityField checks a patch's or a retry's priority: null is refused (a priority is
// never unset), a number outside the range is 422.
func (s *Server) checkPriorityField(f optional[int]) *api.Problem {
	if f.Set && f.Value == nil {
		p := badRequest("priority cannot be null", fieldErr("priority", "cannot be null"))
		return &p
	}
	return checkPriority(f.Value)
}
