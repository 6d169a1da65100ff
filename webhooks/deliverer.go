// Package webhooks delivers events to registered endpoints per Standard Webhooks
// (https://www.standardwebhooks.com). Every replica runs a Deliverer; the repository's claim
// (FOR UPDATE SKIP LOCKED, then a lease) lets any number of them share the work, and a
// delivery whose process dies is claimed again when its lease runs out: at least once.
package webhooks

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/backfillsvc/backfill/repo"
)

// Store is what delivery needs from the repository.
type Store interface {
	WebhookDeliveryClaim(ctx context.Context, limit int, lease time.Duration) ([]repo.WebhookDue, error)
	WebhookDeliveryRecord(ctx context.Context, o repo.WebhookOutcome) (bool, error)
}

// Observer is told the outcome of every attempt, for metrics.
type Observer interface {
	// WebhookAttempted counts an attempt by outcome: delivered, retry or gave_up.
	WebhookAttempted(outcome string)
	// WebhookDelivered observes the lag from the event to its delivery.
	WebhookDelivered(lag time.Duration)
}

// Outcomes of an attempt, as metrics label them.
const (
	OutcomeDelivered = "delivered"
	OutcomeRetry     = "retry"
	OutcomeGaveUp    = "gave_up"
)

type nopObserver struct{}

func (nopObserver) WebhookAttempted(string)        {}
func (nopObserver) WebhookDelivered(time.Duration) {}

// Config tunes a Deliverer. Zero values take defaults.
type Config struct {
	// Interval between polls for due deliveries (default 1s). While deliveries are due and
	// attempts finish, the next claim comes as soon as an attempt ends.
	Interval time.Duration
	// Concurrency is the most attempts in flight at once (default 8). A claim takes only
	// as many deliveries as there are free slots, so that every claimed delivery is
	// attempted at once and the log's attempted_at is when its request went out.
	Concurrency int
	// Timeout bounds one attempt, from dialing to the end of the answer's headers and the
	// first 64 KiB of its body (default 10s, the contract's).
	Timeout time.Duration
	// Lease is how long a claimed delivery is kept from other replicas (default Timeout +
	// 5s). A process that dies mid-attempt delays its deliveries by at most this much.
	Lease time.Duration
	// AllowLocal lets targets resolve to loopback, link-local and unspecified addresses.
	AllowLocal bool
	Logger     *slog.Logger
	Observer   Observer
}

// Deliverer is a start/stop background service.
type Deliverer struct {
	store  Store
	cfg    Config
	log    *slog.Logger
	client *http.Client

	mu      sync.Mutex
	started bool
	cancel  context.CancelFunc
	done    chan struct{}
}

// New returns a stopped Deliverer.
func New(store Store, cfg Config) *Deliverer {
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 8
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.Lease <= 0 {
		cfg.Lease = cfg.Timeout + 5*time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Observer == nil {
		cfg.Observer = nopObserver{}
	}
	return &Deliverer{store: store, cfg: cfg, log: cfg.Logger, client: newHTTPClient(cfg)}
}

// newHTTPClient never follows redirects (a 3xx is a failed attempt like any non-2xx), never
// uses a proxy from the environment (the dial check must see the target itself), and bounds
// every attempt by Timeout.
func newHTTPClient(cfg Config) *http.Client {
	dialer := newDialer(cfg.AllowLocal)
	return &http.Client{
		Timeout: cfg.Timeout,
		Transport: &http.Transport{
			Proxy:                 nil,
			DialContext:           dialer.DialContext,
			ForceAttemptHTTP2:     true,
			MaxIdleConns:          64,
			MaxIdleConnsPerHost:   4,
			IdleConnTimeout:       90 * time.Second,
			TLSHandshakeTimeout:   cfg.Timeout,
			ResponseHeaderTimeout: cfg.Timeout,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// Start spawns the loop: one pass at once, then one per interval. A second Start is a no-op.
func (d *Deliverer) Start(ctx context.Context) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.started {
		return
	}
	d.started = true
	ctx, d.cancel = context.WithCancel(ctx)
	d.done = make(chan struct{})
	go d.loop(ctx, d.done)
}

// Stop ends the loop and waits for it; attempts in flight are abandoned and made due again
// at once. It is idempotent and safe before Start.
func (d *Deliverer) Stop() {
	d.mu.Lock()
	cancel, done := d.cancel, d.done
	d.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-done
}

func (d *Deliverer) loop(ctx context.Context, done chan struct{}) {
	defer close(done)
	var inFlight sync.WaitGroup
	defer inFlight.Wait() // attempts cut off by Stop still record their outcome
	ticker := time.NewTicker(d.cfg.Interval)
	defer ticker.Stop()
	slots := make(chan struct{}, d.cfg.Concurrency) // one token per attempt in flight
	freed := make(chan struct{}, d.cfg.Concurrency)
	for {
		free := cap(slots) - len(slots)
		claimed := 0
		if free > 0 {
			due, err := d.claim(ctx, free)
			switch {
			case err == nil || ctx.Err() != nil:
			case repo.IsUnavailable(err):
				// An outage: every poll would say so; /readyz and the sweep report it too.
				d.log.Warn("webhook delivery: database unavailable", "err", err)
			default:
				d.log.Error("webhook delivery claim failed", "err", err)
			}
			claimed = len(due)
			for _, item := range due {
				slots <- struct{}{}
				inFlight.Go(func() {
					defer func() {
						<-slots
						select {
						case freed <- struct{}{}:
						default:
						}
					}()
					if err := d.deliver(ctx, item); err != nil {
						// The claim's lease makes the delivery due again: at least once holds.
						d.log.Error("webhook attempt outcome not recorded", "err", err)
					}
				})
			}
		}
		// Every slot taken, or every free slot filled: more may be due, so claim again as
		// soon as an attempt ends; otherwise poll on the interval.
		var wake <-chan struct{}
		if free == 0 || claimed == free {
			wake = freed
		}
		select {
		case <-ctx.Done():
			return
		case <-wake:
		case <-ticker.C:
		}
	}
}

// RunOnce claims as many due deliveries as Concurrency allows, makes their attempts at once
// and records every outcome before it returns. Tests call it instead of waiting for the loop.
func (d *Deliverer) RunOnce(ctx context.Context) error {
	due, err := d.claim(ctx, d.cfg.Concurrency)
	if err != nil {
		return err
	}
	errs := make([]error, len(due))
	var wg sync.WaitGroup
	for i, item := range due {
		wg.Go(func() { errs[i] = d.deliver(ctx, item) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (d *Deliverer) claim(ctx context.Context, n int) ([]repo.WebhookDue, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return d.store.WebhookDeliveryClaim(ctx, n, d.cfg.Lease)
}

// deliver makes one attempt and records its outcome.
func (d *Deliverer) deliver(ctx context.Context, item repo.WebhookDue) error {
	start := time.Now()
	status, attemptErr := d.post(ctx, item)
	elapsed := time.Since(start)
	out := repo.WebhookOutcome{WebhookID: item.WebhookID, EventID: item.ID, Attempt: item.Attempt}
	if status != 0 {
		out.StatusCode = &status
	}
	outcome := OutcomeDelivered
	switch {
	case attemptErr == nil && status >= 200 && status < 300:
		out.Delivered = true
	case attemptErr != nil && ctx.Err() != nil:
		// Stopping cut the attempt off: the receiver may or may not have the event. Make it due again at once so
		// that another replica (or this one after a restart) tries it without waiting.
		msg := "interrupted: the service stopped during the attempt"
		out.Error = &msg
		zero := time.Duration(0)
		out.RetryAfter = &zero
		outcome = OutcomeRetry
	default:
		msg := describeFailure(status, attemptErr)
		out.Error = &msg
		if delay, ok := retryDelay(item.Attempt); ok {
			out.RetryAfter = &delay
			outcome = OutcomeRetry
		} else {
			outcome = OutcomeGaveUp
		}
	}
	// The outcome is recorded even while stopping, within a short bound of its own.
	recCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if _, err := d.store.WebhookDeliveryRecord(recCtx, out); err != nil {
		return fmt.Errorf("event %d to webhook %d: %w", item.ID, item.WebhookID, err)
	}
	d.cfg.Observer.WebhookAttempted(outcome)
	if out.Delivered {
		// Both ends on the database's clock: the event's occurred_at and the claim's now.
		d.cfg.Observer.WebhookDelivered(item.Now.Sub(item.OccurredAt) + elapsed)
	}
	level := slog.LevelDebug
	switch outcome {
	case OutcomeRetry:
		level = slog.LevelInfo
	case OutcomeGaveUp:
		level = slog.LevelWarn
	}
	attrs := []any{"webhook_id", item.WebhookID, "event_id", item.ID, "attempt", item.Attempt,
		"status_code", status, "outcome", outcome, "duration_ms", elapsed.Milliseconds()}
	if out.Error != nil {
		attrs = append(attrs, "error", *out.Error)
	}
	d.log.Log(context.WithoutCancel(ctx), level, "webhook attempt", attrs...)
	return nil
}

// maxAnswerBytes is how much of an answer's body is read (and thrown away) so that the
// connection can be reused; a receiver has nothing to tell the sender in it.
const maxAnswerBytes = 64 << 10

// post sends the event and answers the status code (0 when no answer came).
func (d *Deliverer) post(ctx context.Context, item repo.WebhookDue) (int, error) {
	body, err := EventJSON(item.WebhookEvent)
	if err != nil {
		return 0, err
	}
	headers, err := signedHeaders(item.Secret, strconv.FormatInt(item.ID, 10), item.Now, body)
	if err != nil {
		return 0, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, item.URL, bytesReader(body))
	if err != nil {
		return 0, fmt.Errorf("build request: %w", err)
	}
	req.Header = headers
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "backfill-webhooks/1")
	res, err := d.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer res.Body.Close()
	// The status decides; what the body says, or whether it arrives whole, does not.
	_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, maxAnswerBytes))
	return res.StatusCode, nil
}
