package handlers

import (
	"fmt"
	"log/slog"
	"net/http"

	"github.com/backfillsvc/backfill/api"
	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
)

// New builds the service's HTTP handler: admission control, request id, panic recovery, access
// log, metrics, bearer tokens, body limit and spec validation, then the generated router.
func New(opts Options) (http.Handler, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{
		store:   opts.Store,
		logger:  opts.Logger,
		ready:   opts.Ready,
		metrics: opts.Metrics,
	}
	validator, err := newSpecValidator()
	if err != nil {
		return nil, fmt.Errorf("handlers: %w", err)
	}
	r := chi.NewRouter()
	// Admission (admission.go) takes reads first of all, and writes once their body is read.
	admit, admitWrites := passThrough, passThrough
	if opts.Admission != nil && opts.Admission.MaxInFlight > 0 {
		a := newAdmitter(*opts.Admission)
		admit, admitWrites = a.beforeAll, a.afterBody
	}
	r.Use(admit)
	r.Use(middleware.RequestID, s.recoverer, s.accessLog)
	if opts.Instrument != nil {
		r.Use(opts.Instrument)
	}
	r.Use(requireToken(opts.APITokens), limitBody, admitWrites, validator.middleware)
	return api.HandlerWithOptions(s, api.ChiServerOptions{
		BaseRouter: r,
		// Parameters the validator let through but the generated binder cannot read.
		ErrorHandlerFunc: func(w http.ResponseWriter, r *http.Request, err error) {
			writeProblem(w, badRequest(err.Error(), fieldErr("request", err.Error())))
		},
	}), nil
}

func passThrough(next http.Handler) http.Handler { return next }
