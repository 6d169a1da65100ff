// Package handlers is the HTTP layer: it decodes and validates requests against the OpenAPI
// spec, calls the repository through the Store interface, and encodes answers. It holds no SQL.
package handlers

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/backfillsvc/backfill/api"
	"github.com/backfillsvc/backfill/domain"
	"github.com/backfillsvc/backfill/events"
	"github.com/backfillsvc/backfill/repo"
	"github.com/backfillsvc/backfill/tracing"
)

// Store is what the handlers need from the repository.
type Store interface {
	DagPut(ctx context.Context, p repo.DagPutParams) (repo.Dag, bool, error)
	DagGet(ctx context.Context, dagID string) (repo.Dag, error)
	DagList(ctx context.Context, p repo.ListParams) ([]repo.Dag, int, error)
	DagDelete(ctx context.Context, dagID string) error

	RunCreate(ctx context.Context, p repo.RunCreateParams) (repo.Run, bool, error)
	RunGet(ctx context.Context, dagID, runID string) (repo.Run, error)
	RunList(ctx context.Context, p repo.RunListParams) ([]repo.Run, int, error)
	RunReport(ctx context.Context, p repo.RunReportParams) (repo.Run, error)
	RunClaim(ctx context.Context, p repo.RunClaimParams) ([]repo.Run, bool, error)
	RunHeartbeat(ctx context.Context, runPK int64, workerID string) (repo.Heartbeat, error)
	RunRelease(ctx context.Context, runPK int64, workerID string) (repo.Run, error)

	BackfillCreate(ctx context.Context, p domain.BackfillRequest) (repo.Backfill, bool, error)
	BackfillDryRun(ctx context.Context, p domain.BackfillRequest) (repo.DryRun, error)
	BackfillGet(ctx context.Context, id int64) (repo.Backfill, error)
	BackfillGetWithETA(ctx context.Context, id int64) (repo.Backfill, *float64, error)
	BackfillList(ctx context.Context, p repo.BackfillListParams) ([]repo.Backfill, int, error)
	BackfillSlots(ctx context.Context, p repo.BackfillSlotsParams) ([]repo.BackfillSlot, int64, error)
	BackfillPause(ctx context.Context, id int64) (repo.Backfill, error)
	BackfillUnpause(ctx context.Context, id int64) (repo.Backfill, error)
	BackfillCancel(ctx context.Context, id int64) (repo.Backfill, error)

	BackfillGroupCreate(ctx context.Context, p domain.GroupRequest) (repo.BackfillGroup, bool, error)
	BackfillGroupDryRun(ctx context.Context, p domain.GroupRequest) (repo.GroupDryRun, error)
	BackfillGroupGet(ctx context.Context, id int64) (repo.BackfillGroup, error)
	BackfillGroupList(ctx context.Context, p repo.BackfillGroupListParams) ([]repo.BackfillGroup, int, error)
	BackfillGroupPause(ctx context.Context, id int64) (repo.BackfillGroup, error)
	BackfillGroupUnpause(ctx context.Context, id int64) (repo.BackfillGroup, error)
	BackfillGroupCancel(ctx context.Context, id int64) (repo.BackfillGroup, error)
	BackfillGroupPatch(ctx context.Context, p repo.GroupPatchParams) (repo.BackfillGroup, error)

	PoolPut(ctx context.Context, p repo.PoolPutParams) (repo.Pool, bool, error)
	PoolGet(ctx context.Context, name string) (repo.Pool, error)
	PoolList(ctx context.Context, p repo.ListParams) ([]repo.Pool, int, error)
	PoolDelete(ctx context.Context, name string) error

	WebhookCreate(ctx context.Context, p repo.WebhookCreateParams) (repo.Webhook, bool, error)
	WebhookGet(ctx context.Context, id int64) (repo.Webhook, error)
	WebhookList(ctx context.Context, p repo.ListParams) ([]repo.Webhook, int, error)
	WebhookDelete(ctx context.Context, id int64) error
	WebhookAttemptList(ctx context.Context, p repo.WebhookAttemptListParams) ([]repo.WebhookAttempt, int, error)
	BackfillPatch(ctx context.Context, p repo.BackfillPatchParams) (repo.Backfill, error)
	BackfillRetry(ctx context.Context, p repo.BackfillRetryParams) (repo.Backfill, bool, error)
	EventScan(ctx context.Context, p repo.EventScanParams) (repo.EventScanPage, error)
	TerminalEventStored(ctx context.Context, backfillID, after int64) (bool, error)
	BackfillProgressMany(ctx context.Context, ids []int64) ([]repo.Backfill, time.Time, error)
}

// ReadinessFunc reports whether the service can serve: database reachable and migrated.
type ReadinessFunc func(ctx context.Context) error

// Options configure the HTTP handler.
type Options struct {
	Store  Store
	Logger *slog.Logger
	// Ready backs GET /readyz.
	Ready ReadinessFunc
	// Metrics serves GET /metrics; nil answers 404.
	Metrics http.Handler
	// APITokens, when not empty, are the bearer tokens accepted on /api/v1 routes.
	APITokens []string
	// Instrument wraps every request, for metrics by route and status; nil for none.
	Instrument func(next http.Handler) http.Handler
	// EventStreams serves GET /backfills/{id}/events as Server-Sent Events; nil answers
	// such requests 503.
	EventStreams EventStreams
	// StreamKeepAlive is the silence after which a stream sends a comment (default
	// events.DefaultStreamKeepAlive).
	StreamKeepAlive time.Duration
	// Admission bounds the requests served at once (see admission.go); nil admits all.
	Admission *Admission
	// WebhookAllowLocal accepts webhook URLs that name a loopback, link-local or unspecified
	// address literally (WEBHOOK_ALLOW_LOCAL=true); otherwise they are 422 at creation.
	WebhookAllowLocal bool
	// Tracer traces requests (server spans by route, trace_id in the access log); nil is off.
	Tracer *tracing.Tracer
	// Answers counts answers an operator alerts on; nil counts nothing.
	Answers AnswerObserver
	// StatementTimeout is the database sessions' statement_timeout (0: none): a request
	// made of several statements, a page of events, ends within it too (pageBudgets).
	StatementTimeout time.Duration
	// OutboxScans bounds the scanning steps of the outbox run at once (default
	// events.DefaultOutboxScans): streams' replays, and JSON pages past their first step.
	OutboxScans int
	// EventScanRows is the most outbox rows one read statement looks at (default
	// repo.DefaultEventScanRows); tests make it small.
	EventScanRows int
	// ClaimWaker wakes claims that wait for work (wait_seconds); nil leaves them to their
	// polling.
	ClaimWaker ClaimWaker
}

// ClaimWaker is what a waiting claim listens to (events.ClaimWaker): Wait's channel is
// closed when something may have become claimable.
type ClaimWaker interface {
	Wait() <-chan struct{}
	// Stopping is closed when the server drains: waiting claims answer at once.
	Stopping() <-chan struct{}
}

// AnswerObserver counts answers that say something went wrong on the service's side and
// that no status code alone tells apart. The metrics package implements it.
type AnswerObserver interface {
	// OutcomeUnknown counts a change answered 503 outcome_unknown: its session died after
	// the change was sent, so it may or may not have been applied.
	OutcomeUnknown()
}

type nopAnswers struct{}

func (nopAnswers) OutcomeUnknown() {}

// Server implements api.ServerInterface.
type Server struct {
	store   Store
	logger  *slog.Logger
	ready   ReadinessFunc
	metrics http.Handler
	// defaults are api/openapi.yaml's, for what a request leaves out.
	defaults specDefaults

	streams         EventStreams
	streamKeepAlive time.Duration
	// statementTimeout: Options' StatementTimeout.
	statementTimeout time.Duration
	// outbox reads the outbox for pages and streams, in bounded steps that take turns
	// (Options' OutboxScans and EventScanRows).
	outbox *events.Reader
	// webhookAllowLocal: see Options.WebhookAllowLocal.
	webhookAllowLocal bool
	// tracer: see Options.Tracer.
	tracer *tracing.Tracer
	// answers: see Options.Answers; never nil.
	answers AnswerObserver
	// claimWaker: see Options.ClaimWaker; may be nil.
	claimWaker ClaimWaker
}

var _ api.ServerInterface = (*Server)(nil)
