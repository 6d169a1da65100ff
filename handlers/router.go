package handlers

import (
	"fmt"
	"log/slog"
	"net/http"

	"github.com/backfillsvc/backfill/api"
	"github.com/backfillsvc/backfill/events"
	"github.com/go-chi/chi/v5"
)

// New builds the service's HTTP handler: escapes of unreserved characters decoded, admission
// control, request id (echoed in X-Request-Id), access log, metrics, panic recovery, bearer
// tokens, body limit and spec validation, then the generated router. The recoverer sits
// inside the access log and metrics so that a panic's 500 is logged and counted like any
// other answer.
func New(opts Options) (http.Handler, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{
		store:   opts.Store,
		logger:  opts.Logger,
		ready:   opts.Ready,
		metrics: opts.Metrics,

		streams:         opts.EventStreams,
		streamKeepAlive: opts.StreamKeepAlive,

		webhookAllowLocal: opts.WebhookAllowLocal,
		tracer:            opts.Tracer,
		answers:           opts.Answers,

		statementTimeout: opts.StatementTimeout,
		claimWaker:       opts.ClaimWaker,
	}
	if s.answers == nil {
		s.answers = nopAnswers{}
	}
	s.outbox = events.NewReader(opts.Store, opts.EventScanRows, opts.OutboxScans)
	validator, err := newSpecValidator()
	if err != nil {
		return nil, fmt.Errorf("handlers: %w", err)
	}
	s.defaults = validator.defaults
	// Every operation declares its admission class in the spec (admission_class.go); a spec
	// in which one does not is refused here, before anything is served.
	classes, err := admissionClasses()
	if err != nil {
		return nil, fmt.Errorf("handlers: %w", err)
	}
	r := chi.NewRouter()
	// Admission (admission.go) takes reads first of all, and writes once their body is read.
	admit, admitWrites := passThrough, passThrough
	if opts.Admission != nil && opts.Admission.MaxInFlight > 0 {
		a := newAdmitter(*opts.Admission, classes)
		admit, admitWrites = a.beforeAll, a.afterBody
	}
	r.Use(admit)
	// The server span goes inside the request id, which it records, and outside the access
	// log, which logs its trace id; with tracing off Middleware adds no handler at all.
	r.Use(requestID, opts.Tracer.Middleware, s.accessLog)
	if opts.Instrument != nil {
		r.Use(opts.Instrument)
	}
	r.Use(s.recoverer, requireToken(opts.APITokens), limitBody, admitWrites, validator.middleware)
	return decodeUnreservedEscapes(api.HandlerWithOptions(s, api.ChiServerOptions{
		BaseRouter: r,
		// Parameters the validator let through but the generated binder cannot read.
		ErrorHandlerFunc: func(w http.ResponseWriter, r *http.Request, err error) {
			writeProblem(w, badRequest(err.Error(), fieldErr("request", err.Error())))
		},
	})), nil
}

func passThrough(next http.Handler) http.Handler { return next }
