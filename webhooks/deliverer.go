// Package webhooks delivers events to registered endpoints per Standard Webhooks
// (https://www.standardwebhooks.com). Every replica runs a Deliverer; the repository's claim
// (FOR UPDATE SKIP LOCKED, then a lease) lets any number of them share the work, and a
// delivery whose process dies is claimed again when its lease runs out: at least once. The
// Deliverer also fans the outbox's new events out into deliveries (the repository's
// WebhookFanOut, with its claims) and purges the delivery log of deleted webhooks.
package webhooks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/backfillsvc/backfill/domain"
	"github.com/backfillsvc/backfill/internal/defaults"
	"github.com/backfillsvc/backfill/internal/startstop"
	"github.com/backfillsvc/backfill/repo"
	"github.com/backfillsvc/backfill/tracing"
	"go.opentelemetry.io/otel/attribute"
)

// Store is what delivery needs from the repository.
type Store interface {
	WebhookDeliveryClaim(ctx context.Context, p repo.WebhookClaimParams) ([]repo.WebhookDue, error)
	WebhookDeliveryRecord(ctx context.Context, o repo.WebhookOutcome) (bool, error)
	WebhookPurgeDeleted(ctx context.Context, batch int) (int, error)
	WebhookFanOut(ctx context.Context) error
}

// Observer is told the outcome of every attempt, for metrics.
type Observer interface {
	// WebhookAttempted counts an attempt by its outcome, a domain.DeliveryOutcome (delivered,
	// retry or gave_up) as the metric's label.
	WebhookAttempted(outcome string)
	// WebhookDelivered observes the lag from the event to its delivery.
	WebhookDelivered(lag time.Duration)
}

type nopObserver struct{}

func (nopObserver) WebhookAttempted(string)        {}
func (nopObserver) WebhookDelivered(time.Duration) {}

// Config tunes a Deliverer. Zero values take defaults.
type Config struct {
	// Interval between polls for due deliveries (default 500ms). An endpoint whose claim
	// filled its free slots is claimed for again as soon as one of its attempts ends.
	Interval time.Duration
	// Concurrency is the most attempts in flight at once for one endpoint on this replica
	// (WEBHOOK_CONCURRENCY, default 4). Each endpoint is its own queue: a claim takes at most
	// its free slots from each, so an endpoint that hangs holds its own slots and no other's.
	// A claim takes only as many deliveries as there are free slots, so that every claimed
	// delivery is attempted at once and the log's attempted_at is when its request went out.
	Concurrency int
	// MaxInFlight bounds the attempts in flight on this replica for all endpoints together
	// (default 256), shared round-robin.
	MaxInFlight int
	// Timeout bounds one attempt, from dialing to the end of the answer's headers and the
	// first 64 KiB of its body (default 10s, the contract's).
	Timeout time.Duration
	// Lease is how long a claimed delivery is kept from other replicas (default Timeout +
	// 5s). A process that dies mid-attempt delays its deliveries by at most this much.
	Lease time.Duration
	// PurgeInterval is how often the delivery log of deleted webhooks is looked for
	// (default 2s); PurgeBatch bounds the rows one statement removes (default 2,000).
	PurgeInterval time.Duration
	PurgeBatch    int
	// AllowLocal lets targets resolve to loopback, link-local and unspecified addresses.
	AllowLocal bool
	Logger     *slog.Logger
	Observer   Observer
	// Tracer records a span per attempt; nil is off.
	Tracer *tracing.Tracer
}

// Deliverer is a start/stop background service: the delivery loop and the purge of deleted
// webhooks' logs.
type Deliverer struct {
	startstop.Base

	store  Store
	cfg    Config
	log    *slog.Logger
	client *http.Client

	// inFlight counts this replica's attempts in flight per webhook.
	fmu      sync.Mutex
	inFlight map[int64]int
}

// New returns a stopped Deliverer.
func New(store Store, cfg Config) *Deliverer {
	defaults.Positive(&cfg.Interval, DefaultInterval)
	defaults.Positive(&cfg.Concurrency, DefaultConcurrency)
	defaults.Positive(&cfg.MaxInFlight, DefaultMaxInFlight)
	defaults.Positive(&cfg.Timeout, DefaultTimeout)
	defaults.Positive(&cfg.Lease, cfg.Timeout+DefaultLeaseMargin)
	defaults.Positive(&cfg.PurgeInterval, DefaultPurgeInterval)
	defaults.Positive(&cfg.PurgeBatch, DefaultPurgeBatch)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Observer == nil {
		cfg.Observer = nopObserver{}
	}
	d := &Deliverer{store: store, cfg: cfg, log: cfg.Logger, client: newHTTPClient(cfg), inFlight: map[int64]int{}}
	d.Init(d.run, nil)
	return d
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
			MaxIdleConnsPerHost:   cfg.Concurrency,
			IdleConnTimeout:       90 * time.Second,
			TLSHandshakeTimeout:   cfg.Timeout,
			ResponseHeaderTimeout: cfg.Timeout,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// run is what Start (from startstop.Base) spawns: the delivery and purge loops, one pass of
// each at once, then one per interval; a second Start while they run is a no-op. Stop ends
// the loops and waits for them; attempts in flight are abandoned and made due again at once.
// Stop is idempotent and safe before Start.
func (d *Deliverer) run(ctx context.Context) {
	var loops sync.WaitGroup
	loops.Go(func() { d.loop(ctx) })
	loops.Go(func() { d.purgeLoop(ctx) })
	loops.Wait()
}

// InFlight is the number of this replica's attempts in flight to one webhook.
func (d *Deliverer) InFlight(webhookID int64) int {
	d.fmu.Lock()
	defer d.fmu.Unlock()
	return d.inFlight[webhookID]
}

// room is what the next claim may take: per endpoint with attempts in flight, its free
// slots, and in all.
//
// When endpoints with attempts in flight could fill MaxInFlight between them (64 hanging
// endpoints at 4 attempts each fill 256), each of them may hold only its share of it, less
// one endpoint's Concurrency kept for the endpoints with nothing in flight: otherwise the
// replica claims nothing at all until a hung attempt times out, and a healthy endpoint
// waits behind endpoints it has nothing to do with (70 hanging endpoints: a healthy one's
// events up to 10 s late). An endpoint above its share keeps
// what it has in flight and gets no more until it is under it.
func (d *Deliverer) room() (map[int64]int, int) {
	d.fmu.Lock()
	defer d.fmu.Unlock()
	free := make(map[int64]int, len(d.inFlight))
	share := d.cfg.Concurrency
	if busy := len(d.inFlight); busy > 0 {
		share = min(share, max(1, (d.cfg.MaxInFlight-d.cfg.Concurrency)/busy))
	}
	total := 0
	for id, n := range d.inFlight {
		free[id] = max(0, share-n)
		total += n
	}
	return free, d.cfg.MaxInFlight - total
}

func (d *Deliverer) loop(ctx context.Context) {
	var inFlight sync.WaitGroup
	defer inFlight.Wait() // attempts cut off by Stop still record their outcome
	ticker := time.NewTicker(d.cfg.Interval)
	defer ticker.Stop()
	// freed carries the webhook of each attempt that ends; full is the endpoints whose last
	// claim took every free slot, so that more of theirs may be due.
	freed := make(chan int64, d.cfg.MaxInFlight)
	full := map[int64]bool{}
	// fanOut: this claim also makes the deliveries of new events. The poll's claims do; the
	// claims made because an attempt freed a slot do not (one per attempt would read the
	// outbox's horizon once per delivery), so new events wait at most one Interval.
	fanOut := true
	for {
		free, total := d.room()
		if total <= 0 && fanOut {
			// No slot to claim into: the new events still get their deliveries now, so that
			// they are in the log and due the moment a slot frees.
			if err := d.store.WebhookFanOut(ctx); err != nil && ctx.Err() == nil {
				d.log.Warn("webhook fan-out failed", "err", err)
			}
		}
		if total > 0 {
			due, err := d.claim(ctx, free, total, fanOut)
			switch {
			case err == nil || ctx.Err() != nil:
			case repo.IsUnavailable(err):
				// An outage: every poll would say so; /readyz and the sweep report it too.
				d.log.Warn("webhook delivery: database unavailable", "err", err)
			case errors.Is(err, repo.ErrLockWait):
				// A table or row held past LOCK_WAIT (an operator's LOCK TABLE, a migration):
				// the next poll goes on.
				d.log.Warn("webhook delivery claim met a held lock", "err", err)
			default:
				d.log.Error("webhook delivery claim failed", "err", err)
			}
			taken := map[int64]int{}
			for _, item := range due {
				taken[item.WebhookID]++
			}
			clear(full)
			for id, n := range taken {
				room, ok := free[id]
				if !ok {
					room = d.cfg.Concurrency
				}
				full[id] = n >= room
			}
			for _, item := range due {
				d.started1(item.WebhookID)
				inFlight.Go(func() {
					defer func() {
						d.ended(item.WebhookID)
						select {
						case freed <- item.WebhookID:
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
		for {
			select {
			case <-ctx.Done():
				return
			case id := <-freed:
				if !full[id] {
					continue // nothing more of this endpoint's was due at the last claim
				}
				fanOut = false
			case <-ticker.C:
				fanOut = true
			}
			break
		}
	}
}

func (d *Deliverer) started1(webhookID int64) {
	d.fmu.Lock()
	d.inFlight[webhookID]++
	d.fmu.Unlock()
}

func (d *Deliverer) ended(webhookID int64) {
	d.fmu.Lock()
	if d.inFlight[webhookID]--; d.inFlight[webhookID] <= 0 {
		delete(d.inFlight, webhookID)
	}
	d.fmu.Unlock()
}

// purgeLoop removes the delivery log of deleted webhooks in bounded batches, each its own
// short statement, with a pause between them so that the purge of a long log never crowds
// out the service's own work.
func (d *Deliverer) purgeLoop(ctx context.Context) {
	ticker := time.NewTicker(d.cfg.PurgeInterval)
	defer ticker.Stop()
	for {
		if _, err := d.PurgeOnce(ctx); err != nil && ctx.Err() == nil {
			d.log.Error("webhook log purge failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// purgePause is the least rest between two purge batches.
const purgePause = 20 * time.Millisecond

// purgeRest is the rest after a purge batch that took took: at least as long as the batch,
// so that the purge of a long log holds the database for at most half of its time, whatever
// a batch costs on that server (a plan over stale statistics, a busy disk).
func purgeRest(took time.Duration) time.Duration { return max(purgePause, took) }

// PurgeOnce removes the whole delivery log of deleted webhooks, batch by batch, and answers
// how many rows it removed. Tests call it instead of waiting for the loop.
func (d *Deliverer) PurgeOnce(ctx context.Context) (int, error) {
	total := 0
	for {
		start := time.Now()
		bctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		n, err := d.store.WebhookPurgeDeleted(bctx, d.cfg.PurgeBatch)
		cancel()
		total += n
		if err != nil || n == 0 {
			return total, err
		}
		select {
		case <-ctx.Done():
			return total, ctx.Err()
		case <-time.After(purgeRest(time.Since(start))):
		}
	}
}

// RunOnce claims what the endpoints' free slots allow, makes those attempts at once and
// records every outcome before it returns. Tests call it instead of waiting for the loop.
func (d *Deliverer) RunOnce(ctx context.Context) error {
	free, total := d.room()
	due, err := d.claim(ctx, free, total, true)
	if err != nil {
		return err
	}
	errs := make([]error, len(due))
	var wg sync.WaitGroup
	for i, item := range due {
		d.started1(item.WebhookID)
		wg.Go(func() {
			defer d.ended(item.WebhookID)
			errs[i] = d.deliver(ctx, item)
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (d *Deliverer) claim(ctx context.Context, free map[int64]int, total int, fanOut bool) ([]repo.WebhookDue, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return d.store.WebhookDeliveryClaim(ctx, repo.WebhookClaimParams{
		PerEndpoint: d.cfg.Concurrency, Free: free, Limit: total, Lease: d.cfg.Lease, FanOut: fanOut,
	})
}

// deliver makes one attempt and records its outcome.
func (d *Deliverer) deliver(ctx context.Context, item repo.WebhookDue) (err error) {
	if d.cfg.Tracer != nil {
		var end func(error)
		ctx, end = d.cfg.Tracer.WebhookAttempt(ctx, item.WebhookID, item.ID, item.Attempt)
		defer func() { end(err) }()
	}
	start := time.Now()
	status, attemptErr := d.post(ctx, item)
	elapsed := time.Since(start)
	out := repo.WebhookOutcome{WebhookID: item.WebhookID, EventID: item.ID, Attempt: item.Attempt}
	if status != 0 {
		out.StatusCode = &status
	}
	outcome := domain.DeliveryDelivered
	switch {
	case attemptErr == nil && status >= 200 && status < 300:
		out.Delivered = true
	case attemptErr != nil && ctx.Err() != nil:
		// Stopping cut the attempt off before an answer came: the receiver may or may not
		// have the event. Make it due again at once so that another replica (or this one
		// after a restart) tries it without waiting.
		kind := domain.DeliveryErrorTimeout
		out.Error = &kind
		zero := time.Duration(0)
		out.RetryAfter = &zero
		outcome = domain.DeliveryRetry
	default:
		kind := classifyFailure(status, attemptErr)
		out.Error = &kind
		if delay, ok := retryDelay(item.Attempt); ok {
			out.RetryAfter = &delay
			outcome = domain.DeliveryRetry
		} else {
			outcome = domain.DeliveryGaveUp
		}
	}
	// The outcome is recorded even while stopping, within a short bound of its own.
	recCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if _, err := d.store.WebhookDeliveryRecord(recCtx, out); err != nil {
		return fmt.Errorf("event %d to webhook %d: %w", item.ID, item.WebhookID, err)
	}
	d.cfg.Observer.WebhookAttempted(string(outcome))
	tracing.SetAttributes(ctx, attribute.String("webhook.outcome", string(outcome)))
	if out.Delivered {
		// Both ends on the database's clock: the event's occurred_at and the claim's now.
		d.cfg.Observer.WebhookDelivered(item.Now.Sub(item.OccurredAt) + elapsed)
	}
	level := slog.LevelDebug
	switch outcome {
	case domain.DeliveryRetry:
		level = slog.LevelInfo
	case domain.DeliveryGaveUp:
		level = slog.LevelWarn
	}
	attrs := []any{"webhook_id", item.WebhookID, "event_id", item.ID, "attempt", item.Attempt,
		"status_code", status, "outcome", outcome, "duration_ms", elapsed.Milliseconds()}
	if attemptErr != nil {
		// The operator's log keeps the detail that the delivery log (read through the API)
		// leaves out.
		attrs = append(attrs, "error", *out.Error, "detail", attemptErr.Error())
	}
	d.log.Log(context.WithoutCancel(ctx), level, "webhook attempt", attrs...)
	return nil
}

// maxAnswerBytes is how much of an answer's body is read (and thrown away) so that the
// connection can be reused; a receiver has nothing to tell the sender in it.
const maxAnswerBytes = 64 << 10

// post sends the event and answers the status code (0 when no answer came).
func (d *Deliverer) post(ctx context.Context, item repo.WebhookDue) (int, error) {
	body, err := json.Marshal(item.Event)
	if err != nil {
		return 0, fmt.Errorf("encode event %d: %w", item.ID, err)
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
