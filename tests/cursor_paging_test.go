package tests

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/api"
	"github.com/backfillsvc/backfill/client"
	"github.com/stretchr/testify/require"
)

// followCursors reads a listing page by page through next_cursor and returns every entry's
// key in the order served. query holds the listing's filters; page decodes one answer into
// its keys and next cursor.
func followCursors(t *testing.T, e *env, path, query string, limit int, page func(*response) ([]string, *string)) []string {
	t.Helper()
	var keys []string
	var cursor *string
	for pages := 0; ; pages++ {
		require.Less(t, pages, 1000, "the cursors of %s never end", path)
		q := fmt.Sprintf("limit=%d", limit)
		if query != "" {
			q += "&" + query
		}
		if cursor != nil {
			q += "&cursor=" + url.QueryEscape(*cursor)
		}
		res := e.Do(http.MethodGet, path+"?"+q, nil)
		require.Equal(t, http.StatusOK, res.Status, "%s?%s: %s", path, q, res.Body)
		got, next := page(res)
		require.LessOrEqual(t, len(got), limit)
		keys = append(keys, got...)
		if next == nil {
			return keys
		}
		require.Len(t, got, limit, "a page before the last is full")
		cursor = next
	}
}

// TestCursorPagingVisitsEveryEntryOnceInOrder follows next_cursor through each of the four
// listings with a page size that does not divide their lengths, and checks the keys against
// one offset read of the whole list: every entry once, in the list's order, and null after
// the last page.
func TestCursorPagingVisitsEveryEntryOnceInOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// 23 DAGs with one backfill each; the first backfill has 100 slots, every ninth failed.
	for i := range 23 {
		e.PutDag(fmt.Sprintf("d%02d", i), "@daily", "")
	}
	b := e.CreateBackfill(backfillBody("d00", day(1, 1), day(4, 9)))
	for i := 1; i < 23; i++ {
		e.CreateBackfill(backfillBody(fmt.Sprintf("d%02d", i), day(1, 1), day(1, 3)))
	}
	slots := e.Slots(b.Id)
	require.Len(t, slots, 100)
	var failed []string
	for i, s := range slots {
		if i%9 == 0 {
			e.MarkRun("d00", *s.RunId, "failed")
			failed = append(failed, fmt.Sprint(s.SortOrdinal))
		}
	}

	slotPage := func(res *response) ([]string, *string) {
		var c api.BackfillDagRunCollection
		res.Decode(t, &c)
		keys := make([]string, len(c.BackfillDagRuns))
		for i, s := range c.BackfillDagRuns {
			keys[i] = fmt.Sprint(s.SortOrdinal)
		}
		return keys, c.NextCursor
	}
	runPage := func(res *response) ([]string, *string) {
		var c api.DagRunCollection
		res.Decode(t, &c)
		keys := make([]string, len(c.DagRuns))
		for i, r := range c.DagRuns {
			keys[i] = r.LogicalDate.UTC().Format(time.RFC3339)
		}
		return keys, c.NextCursor
	}
	backfillPage := func(res *response) ([]string, *string) {
		var c api.BackfillCollection
		res.Decode(t, &c)
		keys := make([]string, len(c.Backfills))
		for i, b := range c.Backfills {
			keys[i] = fmt.Sprint(b.Id)
		}
		return keys, c.NextCursor
	}
	dagPage := func(res *response) ([]string, *string) {
		var c api.DagCollection
		res.Decode(t, &c)
		keys := make([]string, len(c.Dags))
		for i, d := range c.Dags {
			keys[i] = d.DagId
		}
		return keys, c.NextCursor
	}
	cases := []struct {
		path, query string
		page        func(*response) ([]string, *string)
		want        int
	}{
		{backfillPath(b.Id) + "/dag_runs", "", slotPage, 100},
		{backfillPath(b.Id) + "/dag_runs", "order_by=-sort_ordinal", slotPage, 100},
		{backfillPath(b.Id) + "/dag_runs", "state=failed", slotPage, len(failed)},
		{"/api/v1/dags/d00/runs", "", runPage, 100},
		{"/api/v1/dags/d00/runs", "state=failed", runPage, len(failed)},
		{"/api/v1/backfills", "", backfillPage, 23},
		{"/api/v1/backfills", "order_by=-id", backfillPage, 23},
		{"/api/v1/dags", "", dagPage, 23},
	}
	for _, c := range cases {
		q := "limit=1000"
		if c.query != "" {
			q += "&" + c.query
		}
		res := e.Do(http.MethodGet, c.path+"?"+q, nil)
		all, next := c.page(res)
		require.Nil(t, next, "one page holds all of %s?%s", c.path, c.query)
		require.Len(t, all, c.want, "%s?%s", c.path, c.query)
		got := followCursors(t, e, c.path, c.query, 7, c.page)
		require.Equal(t, all, got, "%s?%s: the cursors visit every entry once, in order", c.path, c.query)
	}
	got := followCursors(t, e, backfillPath(b.Id)+"/dag_runs", "state=failed", 4, slotPage)
	require.Equal(t, failed, got)

	// A cursor names its listing, order and filters' place; offset with it is ambiguous.
	first := e.Do(http.MethodGet, backfillPath(b.Id)+"/dag_runs?limit=5", nil)
	_, next := slotPage(first)
	require.NotNil(t, next)
	for _, bad := range []string{
		backfillPath(b.Id) + "/dag_runs?offset=5&cursor=" + *next,
		backfillPath(b.Id) + "/dag_runs?order_by=-sort_ordinal&cursor=" + *next,
		"/api/v1/backfills?cursor=" + *next,
		"/api/v1/dags?cursor=" + *next,
		"/api/v1/dags?cursor=bm90LWEtY3Vyc29y",
		"/api/v1/dags?cursor=" + strings.Repeat("%21", 3),
		// Forged cursors: the right listing and order, a key the database cannot read as the
		// listing's type (these were 500s).
		"/api/v1/backfills?cursor=" + forgedCursor("backfills", "id", "abc"),
		"/api/v1/backfills?cursor=" + forgedCursor("backfills", "id", "99999999999999999999999"),
		backfillPath(b.Id) + "/dag_runs?cursor=" + forgedCursor("slots", "sort_ordinal", "abc"),
		backfillPath(b.Id) + "/dag_runs?cursor=" + forgedCursor("slots", "sort_ordinal", "3000000000"),
		"/api/v1/dags/d00/runs?cursor=" + forgedCursor("runs", "", "not a date"),
		"/api/v1/dags/d00/runs?cursor=" + forgedCursor("runs", "", "0000-01-01T00:00:00Z"),
		"/api/v1/dags/d00/runs?cursor=" + forgedCursor("runs", "", "\x00"),
		"/api/v1/dags?cursor=" + forgedCursor("dags", "", "\x00"),
	} {
		p := requireProblem(t, e.Do(http.MethodGet, bad, nil), http.StatusBadRequest, "invalid_request", bad)
		require.Equal(t, "cursor", (*p.Errors)[0].Field, bad)
	}
}

// forgedCursor is a cursor as the service encodes one (base64url of its JSON), with any key.
func forgedCursor(list, order, key string) string {
	data, err := json.Marshal(map[string]string{"l": list, "o": order, "k": key})
	if err != nil {
		panic(err)
	}
	return base64.RawURLEncoding.EncodeToString(data)
}

// TestCursorPagesReadAnIndex checks the plans of the keyset queries: each starts at the
// cursor's key in an index instead of reading and discarding the entries before it, so a
// page costs the same at any depth.
func TestCursorPagesReadAnIndex(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	queries := []string{
		`SELECT * FROM backfill_slot_records s WHERE s.backfill_id = 1 AND s.sort_ordinal > 40000 ORDER BY s.sort_ordinal LIMIT 51`,
		`SELECT * FROM dag_runs WHERE dag_id = 'x' AND logical_date > '2024-01-01' ORDER BY logical_date LIMIT 51`,
		`SELECT * FROM backfills WHERE id > 40000 ORDER BY id LIMIT 51`,
		`SELECT * FROM backfills WHERE dag_id = 'x' AND id < 40000 ORDER BY id DESC LIMIT 51`,
		`SELECT * FROM dags WHERE dag_id > 'x' ORDER BY dag_id LIMIT 51`,
	}
	tx := e.DB.MustBegin()
	defer func() { _ = tx.Rollback() }()
	// An empty table is read sequentially whatever the indexes; forbid that to see which index
	// the query can start from.
	tx.MustExec(`SET LOCAL enable_seqscan = off`)
	tx.MustExec(`SET LOCAL enable_sort = off`)
	for _, q := range queries {
		var lines []string
		require.NoError(t, tx.Select(&lines, "EXPLAIN "+q))
		plan := strings.Join(lines, "\n")
		require.Contains(t, plan, "Index", "%s\n%s", q, plan)
		require.NotContains(t, plan, "Sort", "%s\n%s", q, plan)
		require.NotContains(t, plan, "Seq Scan", "%s\n%s", q, plan)
	}
}

// The SDK's iterators follow next_cursor to the end: every failed slot once, in order.
func TestSDKIteratorsFollowCursors(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := e.sdk(t)
	b := e.DailyBackfill("it", day(1, 1), day(2, 29))
	var want []int32
	for i, s := range e.Slots(b.Id) {
		if i%4 == 1 {
			e.MarkRun("it", *s.RunId, "failed")
			want = append(want, s.SortOrdinal)
		}
	}
	var got []int32
	for s, err := range c.AllBackfillRuns(t.Context(), b.Id, &client.ListBackfillDagRunsParams{State: client.Ptr(client.DagRunStateFailed), Limit: client.Ptr(4)}) {
		require.NoError(t, err)
		got = append(got, s.SortOrdinal)
	}
	require.Equal(t, want, got)
	n := 0
	for r, err := range c.AllDagRuns(t.Context(), "it", &client.ListDagRunsParams{Limit: client.Ptr(7)}) {
		require.NoError(t, err)
		require.Equal(t, "it", r.DagId)
		n++
	}
	require.Equal(t, 60, n)
}
