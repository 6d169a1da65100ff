package handlers

import (
	"context"
	"net/http"

	"github.com/backfillsvc/backfill/repo"
)

// answerOffsetPage answers one page of a list that pages only by limit and offset (pools,
// webhooks): list reads the page, collect makes the answer of its records and the total.
func answerOffsetPage[T, C any](s *Server, w http.ResponseWriter, r *http.Request, limit, offset *int,
	list func(context.Context, repo.ListParams) ([]T, int, error), collect func(records []T, total int64) C) {
	l, o := s.page(limit, offset)
	records, total, err := list(r.Context(), repo.ListParams{Limit: l, Offset: o})
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, collect(records, int64(total)))
}
