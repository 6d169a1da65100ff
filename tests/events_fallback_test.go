package tests

import (
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Without a LISTEN session — behind PgBouncer in transaction mode, where LISTEN succeeds and
// then delivers nothing, or with the listener's address refusing connections — a stream still
// gets every event, in order, each within about a second: the listener polls every 500 ms
// until a probe notification proves its session. The safety-net poll is set to an hour, so
// only that fallback can deliver in time.
func TestEventStreamMissesNothingWithoutAListenSession(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		listen func(t testing.TB, dsn string) string
	}{
		{"through PgBouncer in transaction mode", func(t testing.TB, dsn string) string {
			return viaPooler(t, dsn, startPgBouncer(t))
		}},
		{"listener address refuses connections", func(t testing.TB, dsn string) string {
			u, err := url.Parse(dsn)
			require.NoError(t, err)
			u.Host = fmt.Sprintf("127.0.0.1:%d", freeLoopbackPort(t))
			return u.String()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, withListenPoll(time.Hour), withListenDSN(tc.listen))
			b := e.DailyBackfill("nolisten", day(1, 1), day(1, 3))
			s := evOpenStream(t, e, b.Id)
			got := []int64{s.NextEvent().ID}
			// Each change waits for its event: a lost wake-up would hold the stream for the
			// hour-long poll (and fail the stream's 60 s deadline).
			within := func(action, want string) {
				start := time.Now()
				e.ActionOK(b.Id, action)
				ev := s.NextEvent()
				require.Equal(t, want, ev.Type)
				require.Less(t, time.Since(start), 3*time.Second, "%s reached the stream late", want)
				got = append(got, ev.ID)
			}
			for range 4 {
				within("pause", "backfill.paused")
				within("unpause", "backfill.unpaused")
			}
			// Nothing runs: the cancel ends the backfill at once, with backfill.canceled only.
			within("cancel", "backfill.canceled")
			s.RequireEnd()
			stored := evOf(e, b.Id)
			var ids []int64
			for _, ev := range stored {
				ids = append(ids, ev.ID)
			}
			require.Equal(t, ids, got, "every stored event, once, in order")
		})
	}
}
