package tests

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/handlers"
	"github.com/backfillsvc/backfill/metrics"
	"github.com/stretchr/testify/require"
)

// inFlightSignal wraps the Prometheus observer and signals each request admitted to a class.
type inFlightSignal struct {
	*metrics.Metrics
	admitted chan string
}

func (s *inFlightSignal) InFlight(class string, delta int) {
	s.Metrics.InFlight(class, delta)
	if delta > 0 {
		s.admitted <- class
	}
}

// TestOverloadShedsReadsWithBusyWhileHeartbeatsAreAdmitted fills the read slots with requests
// held by a real lock in PostgreSQL (an ACCESS EXCLUSIVE lock on dags: DAG reads wait for it,
// heartbeats never touch the table). A further read is answered 503 busy with Retry-After
// within ADMISSION_WAIT, as the spec documents; a heartbeat is admitted and extends its lease;
// /healthz and /metrics answer. Once the lock goes, the held reads complete.
func TestOverloadShedsReadsWithBusyWhileHeartbeatsAreAdmitted(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	b := e.DailyBackfill("adm", day(1, 1), day(1, 3))
	run := e.Claim("w1", 1)[0]

	// A second front end over the same store, with admission: 4 main slots, 3 of them for reads,
	// and the lease slots of their own. A queue that is not standing would let the shed read
	// wait up to LongWait: the same as Wait here.
	m := metrics.New()
	obs := &inFlightSignal{Metrics: m, admitted: make(chan string, 16)}
	const wait = 100 * time.Millisecond
	h, err := handlers.New(handlers.Options{
		Store:     e.Store,
		Ready:     func(ctx context.Context) error { return e.Store.Ping(ctx) },
		Metrics:   m.Handler(),
		Admission: &handlers.Admission{MaxInFlight: 4, Wait: wait, LongWait: wait, Observer: obs},
	})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	adm := *e
	adm.URL, adm.HTTP = srv.URL, srv.Client()

	ctx := context.Background()
	lock, err := e.DB.BeginTxx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = lock.Rollback() }() // a no-op once rolled back below
	_, err = lock.ExecContext(ctx, `LOCK TABLE dags IN ACCESS EXCLUSIVE MODE`)
	require.NoError(t, err)

	limits := handlers.Admission{MaxInFlight: 4}.Limits()
	heldReads := make(chan error, limits.Default)
	for range limits.Default {
		go func() {
			res, err := adm.do(http.MethodGet, "/api/v1/dags/adm", nil)
			if err == nil && res.Status != http.StatusOK {
				err = fmt.Errorf("held read: %d %s", res.Status, res.Body)
			}
			heldReads <- err
		}()
	}
	for range limits.Default {
		require.Equal(t, "default", <-obs.admitted)
	}

	start := time.Now()
	res := adm.Do(http.MethodGet, fmt.Sprintf("/api/v1/backfills/%d", b.Id), nil)
	elapsed := time.Since(start)
	requireProblem(t, res, http.StatusServiceUnavailable, "busy")
	ra, err := strconv.Atoi(res.Header.Get("Retry-After"))
	require.NoError(t, err, "Retry-After %q", res.Header.Get("Retry-After"))
	require.Positive(t, ra)
	// It came back instead of queueing behind the lock; the bound is generous on purpose.
	require.Less(t, elapsed, wait+10*time.Second)

	hb := adm.Do(http.MethodPost, fmt.Sprintf("/api/v1/runs/%d/heartbeat", run.Id), map[string]any{"worker_id": "w1"})
	require.Equal(t, http.StatusOK, hb.Status, "a heartbeat while reads are shed: %s", hb.Body)
	require.Equal(t, "heartbeat", <-obs.admitted)

	require.Equal(t, http.StatusOK, adm.Do(http.MethodGet, "/healthz", nil).Status)
	metricsRes := adm.Do(http.MethodGet, "/metrics", nil)
	require.Equal(t, http.StatusOK, metricsRes.Status)
	require.Contains(t, string(metricsRes.Body), `backfill_admission_shed_total{class="default"} 1`)
	require.Contains(t, string(metricsRes.Body), `backfill_admission_shed_wait_seconds_count{class="default"} 1`)
	require.Contains(t, string(metricsRes.Body), `backfill_admission_admitted_total{class="heartbeat"} 1`)
	require.True(t, strings.Contains(string(metricsRes.Body), fmt.Sprintf(`backfill_admission_in_flight{class="default"} %d`, limits.Default)),
		"the held reads are in flight:\n%s", metricsRes.Body)

	require.NoError(t, lock.Rollback())
	for range limits.Default {
		require.NoError(t, <-heldReads)
	}
	require.Equal(t, http.StatusOK, adm.Do(http.MethodGet, fmt.Sprintf("/api/v1/backfills/%d", b.Id), nil).Status)
}
