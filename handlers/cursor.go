package handlers

import (
	"encoding/base64"
	"encoding/json"

	"github.com/backfillsvc/backfill/api"
)

// A cursor names the entry a page ended with: which listing and order it belongs to, and that
// entry's sort key. It is opaque to clients (base64url of a small JSON object) so that its
// form can change; the listing and order inside it let a cursor sent to another listing, or
// with another order_by, be refused instead of silently starting somewhere wrong.
type cursor struct {
	List  string `json:"l"`
	Order string `json:"o,omitempty"`
	Key   string `json:"k"`
}

func (c cursor) encode() *string {
	data, _ := json.Marshal(c) // three strings: cannot fail
	s := base64.RawURLEncoding.EncodeToString(data)
	return &s
}

// pageRequest is a listing's page: how many entries to read and where to start.
type pageRequest struct {
	limit  int
	offset int
	after  *string // the key to start after (cursor paging), or nil
}

// pageOf reads limit, offset and cursor. A cursor goes with the listing and order it came
// from, and not with an offset (two starting points for one page).
func (s *Server) pageOf(limit, offset *int, raw *string, list, order string) (pageRequest, *api.Problem) {
	l, o := s.page(limit, offset)
	pr := pageRequest{limit: l, offset: o}
	if raw == nil {
		return pr, nil
	}
	bad := func(msg string) (pageRequest, *api.Problem) {
		p := badRequest("cursor "+msg, fieldErr("cursor", msg))
		return pageRequest{}, &p
	}
	if offset != nil {
		return bad("cannot be sent with offset: send one of them (cursor to follow next_cursor, offset to jump)")
	}
	data, err := base64.RawURLEncoding.DecodeString(*raw)
	var c cursor
	if err != nil || json.Unmarshal(data, &c) != nil || c.Key == "" {
		return bad("is not a cursor this service gave: send a next_cursor as it was answered")
	}
	if c.List != list || c.Order != order {
		return bad("belongs to another listing or order_by: send it with the request whose answer it came in")
	}
	pr.after = &c.Key
	return pr, nil
}

// repoLimit is the number of entries to read for a page: one more than it shows, so that the
// extra one tells whether a next page exists without a count.
func (pr pageRequest) repoLimit() int { return pr.limit + 1 }

// nextCursor trims a page read with repoLimit to its size, and answers the cursor of its last
// entry when more follow (nil on the last page). key gives an entry's sort key.
func nextCursor[T any](entries []T, pr pageRequest, list, order string, key func(T) string) ([]T, *string) {
	if len(entries) <= pr.limit {
		return entries, nil
	}
	entries = entries[:pr.limit]
	if pr.limit == 0 {
		return entries, nil
	}
	return entries, cursor{List: list, Order: order, Key: key(entries[len(entries)-1])}.encode()
}
