package handlers

import (
	"encoding/base64"
	"encoding/json"
	"strconv"
	"time"

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

// A listing is a collection paged by cursor: its name inside its cursors, and the form of its
// entries' sort keys. A cursor is not signed, so its key is checked here against that form:
// a key the database cannot read as the listing's type (a forged or mangled cursor) is the
// client's mistake, a 400, never the database's error. Each check accepts exactly the keys
// the listing writes (nextCursor's key function), so a key that parses is also a key
// PostgreSQL reads as the same value.
type listing struct {
	name     string
	keyValid func(string) bool
}

var (
	backfillListing = listing{"backfills", func(k string) bool { return isDecimalKey(k, 64) }}
	slotListing     = listing{"slots", func(k string) bool { return isDecimalKey(k, 32) }}
	groupListing    = listing{"backfill_groups", func(k string) bool { return isDecimalKey(k, 64) }}
	runListing      = listing{"runs", isLogicalDateKey}
	dagListing      = listing{"dags", isDagIDKey}
)

// isDecimalKey: an integer of the given size as strconv writes it, so without a sign, leading
// zeros or spaces (ParseInt alone takes "+1" and "01").
func isDecimalKey(k string, bits int) bool {
	n, err := strconv.ParseInt(k, 10, bits)
	return err == nil && strconv.FormatInt(n, 10) == k
}

// isLogicalDateKey: a time as the runs listing writes it, in UTC RFC 3339 with at most
// microseconds, in the years PostgreSQL's timestamptz and Go share (year 0 parses in Go and
// does not exist in PostgreSQL). Go's parser takes any offset below 24 hours and a minute of
// 60; PostgreSQL refuses offsets beyond ±15:59 (SQLSTATE 22009), so only Z is taken.
func isLogicalDateKey(k string) bool {
	t, err := time.Parse(time.RFC3339Nano, k)
	return err == nil && t.Year() >= 1 && t.Year() <= 9999 && t.Nanosecond()%1000 == 0 &&
		t.UTC().Format(time.RFC3339Nano) == k
}

// isDagIDKey: the DagId schema's pattern, 1-250 characters of [A-Za-z0-9_.-] but not . or ..,
// which every stored dag_id matches.
func isDagIDKey(k string) bool {
	if len(k) == 0 || len(k) > 250 || k == "." || k == ".." {
		return false
	}
	for i := 0; i < len(k); i++ {
		switch c := k[i]; {
		case c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '_', c == '.', c == '-':
		default:
			return false
		}
	}
	return true
}

// pageRequest is a listing's page: how many entries to read and where to start.
type pageRequest struct {
	limit  int
	offset int
	after  *string // the key to start after (cursor paging), or nil
}

// pageOf reads limit, offset and cursor. A cursor goes with the listing and order it came
// from, and not with an offset (two starting points for one page).
func (s *Server) pageOf(limit, offset *int, raw *string, list listing, order string) (pageRequest, *api.Problem) {
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
	if c.List != list.name || c.Order != order {
		return bad("belongs to another listing or order_by: send it with the request whose answer it came in")
	}
	if !list.keyValid(c.Key) {
		return bad("is not a cursor this service gave: send a next_cursor as it was answered")
	}
	pr.after = &c.Key
	return pr, nil
}

// repoLimit is the number of entries to read for a page: one more than it shows, so that the
// extra one tells whether a next page exists without a count.
func (pr pageRequest) repoLimit() int { return pr.limit + 1 }

// nextCursor trims a page read with repoLimit to its size, and answers the cursor of its last
// entry when more follow (nil on the last page). key gives an entry's sort key.
func nextCursor[T any](entries []T, pr pageRequest, list listing, order string, key func(T) string) ([]T, *string) {
	if len(entries) <= pr.limit {
		return entries, nil
	}
	entries = entries[:pr.limit]
	if pr.limit == 0 {
		return entries, nil
	}
	return entries, cursor{List: list.name, Order: order, Key: key(entries[len(entries)-1])}.encode()
}
