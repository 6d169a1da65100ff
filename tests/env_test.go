package tests

import (
	"bytes"
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/api"
	"github.com/backfillsvc/backfill/events"
	"github.com/backfillsvc/backfill/handlers"
	"github.com/backfillsvc/backfill/internal/testkit/pgproxy"
	"github.com/backfillsvc/backfill/internal/testkit/pgtest"
	"github.com/backfillsvc/backfill/metrics"
	"github.com/backfillsvc/backfill/pgrun"
	"github.com/backfillsvc/backfill/repo"
	"github.com/backfillsvc/backfill/sweeper"
	"github.com/backfillsvc/backfill/tracing"
	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"
	"github.com/stretchr/testify/require"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// clock is the test database's clock, stopped at an instant (pgtest.SetClock): tests move it
// forward instead of sleeping, and every replica over that database sees the same time.
type clock struct {
	t   testing.TB
	db  *sqlx.DB
	mu  sync.Mutex
	now time.Time
}

// Now is the database's time.
func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the database's clock forward.
func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.set(c.now.Add(d))
}

func (c *clock) set(now time.Time) {
	require.NoError(c.t, pgtest.SetClock(context.Background(), c.db, now))
	c.now = now
}

// env is one service instance over its own fresh database, served over real HTTP.
type env struct {
	t     testing.TB
	DB    *sqlx.DB
	DSN   string
	Store *repo.Store
	Clock *clock
	Sweep *sweeper.Sweeper
	Hub   *events.Hub
	URL   string
	HTTP  *http.Client
	// Token is sent as a bearer token when set.
	Token string
	// Proxy stands between the store and PostgreSQL with withProxy (nil otherwise); DB and
	// the event hub connect directly.
	Proxy *pgproxy.Proxy
}

type envOptions struct {
	maxBackfillRuns int
	// maxRunDependencies is the store's MAX_RUN_DEPENDENCIES (0: the default).
	maxRunDependencies int64
	maxAttempts        int
	tokens             []string
	// Event streams: the hub's stream limit, the keep-alive period, and polling without
	// LISTEN at this interval (0: LISTEN with the default poll).
	maxStreams   int
	keepAlive    time.Duration
	pollOnlyEach time.Duration
	// pollEach is the hub's fallback poll with LISTEN on (0: the default).
	pollEach time.Duration
	// writeTimeout is the HTTP server's WriteTimeout, as cmd/api sets one (0: none).
	writeTimeout time.Duration
	// proxied: the store's pool reaches PostgreSQL through a fault-injecting proxy
	// (env.Proxy), over pgrun.Connector as cmd/api opens it.
	proxied bool
	// storeDSN, when set, maps the test database's DSN to the one the service's store
	// connects to (through a fault-injecting proxy, say); e.DB stays direct.
	storeDSN func(dsn string) string
	// listenDSN, when set, gives the event listener its DSN from the database's.
	listenDSN func(t testing.TB, dsn string) string
	// localWebhooksRefused runs the API without WEBHOOK_ALLOW_LOCAL: the tests' receivers
	// listen on 127.0.0.1, so the default env allows local webhook URLs.
	localWebhooksRefused bool
	// tracer traces the requests, transactions and sweeps (nil: off, as by default).
	tracer *tracing.Tracer
	// admission, when set, admits requests as cmd/api does; statementTimeout sets the store's
	// sessions' statement_timeout and tells the handlers, as DB_STATEMENT_TIMEOUT does.
	admission        *handlers.Admission
	statementTimeout time.Duration
	// lockWait is the store's LOCK_WAIT (0: repo.DefaultLockWait, as cmd/api's default).
	lockWait time.Duration
	// priorityAging is the store's PRIORITY_AGING (0: the default).
	priorityAging time.Duration
}

type envOption func(*envOptions)

func withMaxBackfillRuns(n int) envOption { return func(o *envOptions) { o.maxBackfillRuns = n } }
func withMaxAttempts(n int) envOption     { return func(o *envOptions) { o.maxAttempts = n } }
func withMaxRunDependencies(n int64) envOption {
	return func(o *envOptions) { o.maxRunDependencies = n }
}
func withTokens(t ...string) envOption { return func(o *envOptions) { o.tokens = t } }
func withMaxStreams(n int) envOption   { return func(o *envOptions) { o.maxStreams = n } }
func withKeepAlive(d time.Duration) envOption {
	return func(o *envOptions) { o.keepAlive = d }
}
func withWriteTimeout(d time.Duration) envOption {
	return func(o *envOptions) { o.writeTimeout = d }
}
func withListenPoll(every time.Duration) envOption {
	return func(o *envOptions) { o.pollEach = every }
}
func withLockWait(d time.Duration) envOption { return func(o *envOptions) { o.lockWait = d } }
func withProxy() envOption                   { return func(o *envOptions) { o.proxied = true } }
func withTracer(t *tracing.Tracer) envOption { return func(o *envOptions) { o.tracer = t } }
func withStoreDSN(f func(dsn string) string) envOption {
	return func(o *envOptions) { o.storeDSN = f }
}
func withListenDSN(f func(t testing.TB, dsn string) string) envOption {
	return func(o *envOptions) { o.listenDSN = f }
}
func withLocalWebhooksRefused() envOption {
	return func(o *envOptions) { o.localWebhooksRefused = true }
}
func withAdmission(a handlers.Admission) envOption {
	return func(o *envOptions) { o.admission = &a }
}
func withStatementTimeout(d time.Duration) envOption {
	return func(o *envOptions) {
		o.statementTimeout = d
		o.storeDSN = func(dsn string) string {
			return dsn + fmt.Sprintf("&statement_timeout=%d", d.Milliseconds())
		}
	}
}
func withPollOnly(every time.Duration) envOption {
	return func(o *envOptions) { o.pollOnlyEach = every }
}

// newEnv starts a service on a fresh database. The clock starts at the real now, truncated
// to the second; the sweeper is built but not started: tests call e.SweepOnce().
func newEnv(t testing.TB, opts ...envOption) *env {
	t.Helper()
	var o envOptions
	for _, opt := range opts {
		opt(&o)
	}
	db, dsn := openServicePool(t)
	// As cmd/api sizes its pool: every open session may stay idle. database/sql keeps 2 by
	// default, and then a service under 8 concurrent writers closed a session at almost every
	// release and opened another at the next request (182 sessions in a 10 s test, each a
	// fork, a login, and its statements prepared again), which saturated 2 cores and gave
	// the writers p99s of 200–300 ms that were the test's, not the service's.
	db.SetMaxOpenConns(40)
	db.SetMaxIdleConns(40)
	clk := &clock{t: t, db: db}
	clk.set(time.Now().UTC().Truncate(time.Second))
	storeDB, proxy, hubDSN := db, (*pgproxy.Proxy)(nil), dsn
	addr := pooledAddr(t)
	switch {
	case o.proxied:
		storeDB, proxy = proxiedDB(t, dsn)
	case o.storeDSN != nil:
		storeDB = openStoreDB(t, o.storeDSN(dsn))
	case addr != "":
		// Under the pooled suite the service reaches its database only through PgBouncer in
		// transaction mode (pgbouncer_test.go); the test's own checks (e.DB) stay direct.
		hubDSN = viaPooler(t, dsn, addr)
		storeDB = openStoreDBWith(t, hubDSN, pgrun.ConnectorBehindPooler)
	}
	m := metrics.New()
	logger := slog.New(slog.DiscardHandler)
	if os.Getenv("TEST_LOG") != "" {
		logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	// As cmd/api wires it: the store's event-writing changes wake the hubs through NOTIFY.
	notifier := events.NewNotifier(func(ctx context.Context, statement string) error {
		_, err := storeDB.ExecContext(ctx, statement)
		return err
	}, 0, logger)
	require.NoError(t, notifier.Start(context.Background()))
	t.Cleanup(notifier.Stop)
	claimWaker := startClaimWaker(t, storeDB, dsn, logger)
	store := repo.New(storeDB, repo.Config{
		MaxBackfillRuns:    o.maxBackfillRuns,
		MaxRunDependencies: o.maxRunDependencies,
		MaxAttempts:        o.maxAttempts,
		OnClaimable:        claimWaker.Kick,
		Observer:           m,
		OnEvents:           notifier.Kick,
		// As cmd/api with DB_POOLER=none, except under PgBouncer in transaction mode, where
		// the service runs with DB_POOLER=transaction.
		PrepareStatements: addr == "",
		Tracer:            o.tracer,
		LockWait:          o.lockWait,
		PriorityAging:     o.priorityAging,
	})
	m.WatchStates(store.StateCounts)
	m.WatchPriorities(store.QueuedByPriority)
	m.WatchPools(func(ctx context.Context) (map[string]metrics.PoolFigures, error) {
		pools, err := store.PoolFigures(ctx)
		out := map[string]metrics.PoolFigures{}
		for _, p := range pools {
			out[p.Name] = metrics.PoolFigures{Slots: int64(p.Slots), Running: int64(p.Running), Queued: int64(p.Queued), PacedOut: p.NextStartAt != nil}
		}
		return out, err
	})
	if o.listenDSN != nil {
		hubDSN = o.listenDSN(t, dsn)
	}
	hubCfg := events.Config{DSN: hubDSN, PollInterval: o.pollEach, MaxStreams: o.maxStreams, Observer: m, Logger: logger}
	if o.pollOnlyEach > 0 {
		hubCfg.DSN, hubCfg.PollInterval = "", o.pollOnlyEach
	}
	hub := events.New(store, hubCfg)
	require.NoError(t, hub.Start(context.Background()))
	t.Cleanup(hub.Stop)
	h, err := handlers.New(handlers.Options{
		EventStreams:    hub,
		StreamKeepAlive: o.keepAlive,
		Store:           store,
		Logger:          logger,
		Ready:           func(ctx context.Context) error { return store.Ping(ctx) },
		Metrics:         m.Handler(),
		APITokens:       o.tokens,
		Instrument:      m.Instrument,

		WebhookAllowLocal: !o.localWebhooksRefused,
		Tracer:            o.tracer,
		Answers:           m,
		Admission:         o.admission,
		StatementTimeout:  o.statementTimeout,
		ClaimWaker:        claimWaker,
	})
	require.NoError(t, err)
	srv := httptest.NewUnstartedServer(h)
	srv.Config.WriteTimeout = o.writeTimeout
	srv.Start()
	t.Cleanup(srv.Close)
	// Cleanups run last-in first-out: streams end before srv.Close waits for every request.
	t.Cleanup(hub.EndStreams)
	return &env{
		t:     t,
		DB:    db,
		DSN:   dsn,
		Store: store,
		Clock: clk,
		Sweep: sweeper.New(store, sweeper.Config{Batch: 100, Tracer: o.tracer}),
		Hub:   hub,
		URL:   srv.URL,
		HTTP:  srv.Client(),
		Proxy: proxy,
	}
}

// proxiedDB is a pool on dsn's database through a new pgproxy, opened as cmd/api opens its
// own: lib/pq's connector wrapped by pgrun.Connector.
func proxiedDB(t testing.TB, dsn string) (*sqlx.DB, *pgproxy.Proxy) {
	t.Helper()
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	p := pgproxy.Start(t, u.Host)
	return openStoreDB(t, p.DSN(t, dsn)), p
}

// SweepOnce runs one sweep pass and fails the test on error.
func (e *env) SweepOnce() {
	e.t.Helper()
	require.NoError(e.t, e.Sweep.RunOnce(context.Background()))
}

// response is a real answer of the service, already checked against the spec.
type response struct {
	Status int
	Header http.Header
	Body   []byte
}

// Decode unmarshals the body into v.
func (r *response) Decode(t testing.TB, v any) {
	t.Helper()
	require.NoError(t, json.Unmarshal(r.Body, v), "body: %s", r.Body)
}

// Problem decodes a problem+json answer.
func (r *response) Problem(t testing.TB) api.Problem {
	t.Helper()
	require.Equal(t, "application/problem+json", r.Header.Get("Content-Type"), "body: %s", r.Body)
	var p api.Problem
	r.Decode(t, &p)
	return p
}

// requireProblem is the one check of an error answer: its status, the problem+json media
// type, a status, type, title and code in the body, and for a 400 the offending fields. It
// returns the problem for checks of its own; what, if given, says which case failed.
func requireProblem(t testing.TB, res *response, status int, code string, what ...any) api.Problem {
	t.Helper()
	msg := fmt.Sprint(what...) + " body: %s"
	require.Equal(t, status, res.Status, msg, res.Body)
	p := res.Problem(t)
	require.Equal(t, api.ProblemCode(code), p.Code, msg, res.Body)
	require.EqualValues(t, status, p.Status, msg, res.Body)
	require.NotEmpty(t, p.Type, msg, res.Body)
	require.NotEmpty(t, p.Title, msg, res.Body)
	if status == http.StatusBadRequest {
		require.NotNil(t, p.Errors, "a 400 carries errors: "+msg, res.Body)
		require.NotEmpty(t, *p.Errors, "a 400 carries errors: "+msg, res.Body)
	}
	return p
}

// Do sends a request and validates the answer against api/openapi.yaml: its status must be
// documented for the route and its body must match the schema. body may be nil, a string or
// []byte (sent as is), or any value (sent as JSON). headers come in name, value pairs.
func (e *env) Do(method, path string, body any, headers ...string) *response {
	e.t.Helper()
	resp, err := e.do(method, path, body, headers...)
	require.NoError(e.t, err)
	return resp
}

// do is Do without test assertions, safe to call from many goroutines; it returns an error
// for a transport failure or a spec violation.
func (e *env) do(method, path string, body any, headers ...string) (*response, error) {
	var payload []byte
	switch b := body.(type) {
	case nil:
	case string:
		payload = []byte(b)
	case []byte:
		payload = b
	default:
		var err error
		if payload, err = json.Marshal(b); err != nil {
			return nil, err
		}
	}
	req, err := http.NewRequest(method, e.URL+path, bytes.NewReader(payload))
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if e.Token != "" {
		req.Header.Set("Authorization", "Bearer "+e.Token)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := e.HTTP.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	if err != nil {
		return nil, err
	}
	out := &response{Status: res.StatusCode, Header: res.Header, Body: data}
	if err := checkAgainstSpec(req, payload, out); err != nil {
		return out, err
	}
	return out, nil
}

// openServicePool opens a fresh database through the connector the service itself uses
// (pgrun.Connector), so that every test exercises the production driver path: reconnects, and
// a statement whose answer is lost never sent twice.
func openServicePool(t testing.TB) (*sqlx.DB, string) {
	t.Helper()
	dsn := pgtest.NewDatabase(t)
	pc, err := pq.NewConnector(withServiceParams(t, dsn))
	require.NoError(t, err)
	db := sqlx.NewDb(sql.OpenDB(pgrun.Connector(pc, time.Second)), "postgres")
	// Cleanups run last-in first-out: this Close runs before NewDatabase's DROP.
	t.Cleanup(func() { _ = db.Close() })
	require.NoError(t, db.Ping())
	return db, dsn
}

// openStoreDB opens a pool the way cmd/api does (pgrun.Connector waits out refused
// connections), with as many connections as the tests' default pool.
func openStoreDB(t testing.TB, dsn string) *sqlx.DB {
	t.Helper()
	return openStoreDBWith(t, dsn, pgrun.Connector)
}

// openStoreDBWith is openStoreDB through the given repo connector (ConnectorBehindPooler
// behind PgBouncer, as cmd/api with DB_POOLER=transaction).
func openStoreDBWith(t testing.TB, dsn string, connector func(driver.Connector, time.Duration) driver.Connector) *sqlx.DB {
	t.Helper()
	c, err := pq.NewConnector(withServiceParams(t, dsn))
	require.NoError(t, err)
	db := sqlx.NewDb(sql.OpenDB(connector(c, 5*time.Second)), "postgres")
	db.SetMaxOpenConns(40)
	db.SetMaxIdleConns(40)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// withServiceParams adds the driver parameters that cmd/api adds to every DSN it opens
// (binary_parameters=yes: a statement with parameters goes in one exchange, which a
// transaction pooler needs), so that tests drive lib/pq the way the service does.
func withServiceParams(t testing.TB, dsn string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	q := u.Query()
	q.Set("binary_parameters", "yes")
	u.RawQuery = q.Encode()
	return u.String()
}
