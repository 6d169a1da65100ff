package tests

import (
	"context"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/handlers"
	"github.com/backfillsvc/backfill/metrics"
	"github.com/backfillsvc/backfill/repo"
	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"
)

// admissionCounts wraps the Prometheus observer and counts what admission did, by class.
type admissionCounts struct {
	*metrics.Metrics
	mu       sync.Mutex
	admitted map[string]int
	shed     map[string]int
}

func (c *admissionCounts) Admitted(class string, waited time.Duration) {
	c.Metrics.Admitted(class, waited)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.admitted[class]++
}

func (c *admissionCounts) Shed(class string, waited time.Duration) {
	c.Metrics.Shed(class, waited)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.shed[class]++
}

// counts returns copies of the tallies.
func (c *admissionCounts) counts() (admitted, shed map[string]int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	admitted, shed = map[string]int{}, map[string]int{}
	for k, v := range c.admitted {
		admitted[k] = v
	}
	for k, v := range c.shed {
		shed[k] = v
	}
	return admitted, shed
}

// productionShape is a second front end over e's database, built as cmd/api builds the
// service with its defaults: a main pool of DB_MAX_CONNS (20), a lease pool of its own
// (DB_LEASE_MAX_CONNS, 4), admission with ADMISSION_MAX_IN_FLIGHT (18), ADMISSION_WAIT
// (100 ms) and ADMISSION_LONG_WAIT (1 s), and LOCK_WAIT (lockWait). The returned env talks to
// it; its Store is the front end's.
func productionShape(t *testing.T, e *env, lockWait time.Duration) (*env, *admissionCounts) {
	t.Helper()
	return productionShapeScaled(t, e, lockWait, 1)
}

// productionShapeScaled is productionShape with its wall-clock settings (LOCK_WAIT and the
// admission waits) multiplied by scale, for a test whose claim is what admission does, not
// how fast this machine is: at scale 1 it is productionShape.
func productionShapeScaled(t *testing.T, e *env, lockWait time.Duration, scale float64) (*env, *admissionCounts) {
	t.Helper()
	scaled := func(d time.Duration) time.Duration { return time.Duration(float64(d) * scale) }
	pool := func(n int) *sqlx.DB {
		db, err := sqlx.Open("postgres", e.DSN)
		require.NoError(t, err)
		db.SetMaxOpenConns(n)
		db.SetMaxIdleConns(n)
		t.Cleanup(func() { _ = db.Close() })
		return db
	}
	m := metrics.New()
	store := repo.New(pool(20), repo.Config{Observer: m, LockWait: scaled(lockWait), LeaseDB: pool(4), PrepareStatements: true})
	obs := &admissionCounts{Metrics: m, admitted: map[string]int{}, shed: map[string]int{}}
	h, err := handlers.New(handlers.Options{
		Store:   store,
		Ready:   func(ctx context.Context) error { return store.Ping(ctx) },
		Metrics: m.Handler(),
		Admission: &handlers.Admission{MaxInFlight: 18, LeaseMaxInFlight: 4,
			Wait: scaled(100 * time.Millisecond), LongWait: scaled(time.Second), Observer: obs},
	})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	adm := *e
	adm.URL, adm.HTTP, adm.Store = srv.URL, srv.Client(), store
	return &adm, obs
}

// loadDatabase keeps n sessions of PostgreSQL busy with CPU-bound queries until the test
// ends, so that requests meet a database that is slow to answer, as in production under load.
func loadDatabase(t *testing.T, e *env, n int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			for ctx.Err() == nil {
				// Errors are the cancellation at the end of the test: nothing to report.
				_, _ = e.DB.ExecContext(ctx, `SELECT count(*) FROM generate_series(1, 300000) g WHERE g % 7 = 3`)
			}
		})
	}
	t.Cleanup(func() { cancel(); wg.Wait() })
}
