// Package events holds each replica's LISTEN/NOTIFY machinery. The Hub is the replica's one
// listener on the outbox (the events table): it wakes on PostgreSQL NOTIFY, polls as a
// fallback so that a lost notification delays an event but never loses it (every
// PollInterval, and every FallbackPollInterval while streams are open and no LISTEN session
// is proven to deliver, as behind a transaction pooler: probe.go), and fans new events and
// progress changes out to the replica's streams, so that they cost one LISTEN connection, one
// outbox read per wake-up and one progress query per tick, however many backfills they
// follow. A Stream (stream.go) is one client's: its replay of stored events, then what the hub
// hands it, written to a Sink that frames them (handlers: Server-Sent Events). A Reader
// (reader.go) reads the outbox in bounded steps for streams and JSON pages alike. Notifiers send the replica's NOTIFYs
// (on Channel, and on ClaimableChannel), one small transaction at a time, so that the
// writers never notify themselves; the ClaimWaker wakes the replica's waiting claims, on a
// LISTEN session of its own.
package events

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/backfillsvc/backfill/domain"
	"github.com/backfillsvc/backfill/internal/defaults"
	"github.com/backfillsvc/backfill/internal/startstop"
	"github.com/backfillsvc/backfill/repo"
	"github.com/lib/pq"
)

// Channel is the NOTIFY channel on which Notifier wakes every replica's hub after a change
// that may have written events.
const Channel = "backfill_events"

// ErrTooManyStreams is Subscribe's answer beyond Config.MaxStreams.
var ErrTooManyStreams = errors.New("events: too many streams")

// ErrStopped is Subscribe's answer once the hub is stopping.
var ErrStopped = errors.New("events: hub stopped")

// Store is what the hub reads.
type Store interface {
	EventPage(ctx context.Context, p repo.EventListParams) (events []domain.Event, held bool, err error)
	EventLastID(ctx context.Context) (int64, error)
	BackfillProgressMany(ctx context.Context, ids []int64) ([]repo.Backfill, time.Time, error)
}

// Observer is told what an operator watches; the metrics package implements it.
type Observer interface {
	// EventRead: the listener read one event for its streams, lag after its transaction.
	EventRead(lag time.Duration)
	StreamsOpen(n int)
	StreamRejected()
}

type nopObserver struct{}

func (nopObserver) EventRead(time.Duration) {}
func (nopObserver) StreamsOpen(int)         {}
func (nopObserver) StreamRejected()         {}

// Config tunes a Hub. Zero values take defaults.
type Config struct {
	// DSN, when set, is used for a dedicated LISTEN connection; without it the hub polls only.
	DSN string
	// PollInterval is the fallback read of the outbox when no notification came (default 2s).
	PollInterval time.Duration
	// FallbackPollInterval is the read of the outbox while streams are open and no LISTEN
	// session is proven to deliver notifications (default 500ms; probe.go says why a LISTEN
	// that succeeded may still deliver nothing).
	FallbackPollInterval time.Duration
	// ProgressInterval is how often followed backfills' counts are read (default 250ms: the
	// contract's "at most 4 progress messages a second").
	ProgressInterval time.Duration
	// ListenIdle is how long the LISTEN session outlives the replica's last stream (default
	// 10s): enough for a console or a CLI that reconnects to find it still there.
	ListenIdle time.Duration
	// MaxStreams bounds the open streams of this replica (default 2000).
	MaxStreams int
	// Batch is the most events read in one query (default 500).
	Batch    int
	Logger   *slog.Logger
	Observer Observer
}

// Hub is a start/stop background service.
type Hub struct {
	startstop.Base

	store Store
	cfg   Config
	log   *slog.Logger
	obs   Observer

	mu       sync.Mutex
	subs     map[int64]map[*Subscription]struct{}
	count    int
	lastEnd  time.Time // when the last stream closed (count fell to 0)
	stopping bool
	stopped  chan struct{} // closed when streams must end (Stop)

	// Owned by the loop goroutine (set by start before it is spawned).
	cursor   int64
	progress map[int64]Progress
}

// New returns a stopped Hub.
func New(store Store, cfg Config) *Hub {
	defaults.Positive(&cfg.PollInterval, DefaultPollInterval)
	defaults.Positive(&cfg.FallbackPollInterval, 500*time.Millisecond)
	cfg.FallbackPollInterval = min(cfg.FallbackPollInterval, cfg.PollInterval)
	defaults.Positive(&cfg.ProgressInterval, DefaultProgressInterval)
	defaults.Positive(&cfg.ListenIdle, DefaultListenIdle)
	defaults.Positive(&cfg.MaxStreams, DefaultMaxStreams)
	defaults.Positive(&cfg.Batch, DefaultBatch)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	obs := cfg.Observer
	if obs == nil {
		obs = nopObserver{}
	}
	h := &Hub{
		store: store, cfg: cfg, log: cfg.Logger, obs: obs,
		subs:     map[int64]map[*Subscription]struct{}{},
		stopped:  make(chan struct{}),
		progress: map[int64]Progress{},
	}
	// Start (from startstop.Base) begins listening from the outbox's current end (streams
	// replay older events themselves). It returns an error only when the outbox cannot be
	// read at all; a LISTEN connection that fails is retried in the background while polling
	// carries on. A second Start while the listener runs is a no-op.
	h.Init(h.loop, h.start)
	return h
}

// start reads where the outbox ends before the loop is spawned.
func (h *Hub) start(ctx context.Context) error {
	cursor, err := h.store.EventLastID(ctx)
	if err != nil {
		return err
	}
	h.cursor = cursor
	return nil
}

// EndStreams makes every open stream end and refuses new ones; the server calls it when
// shutdown begins, so that draining does not wait for streams that would never end alone.
// It is idempotent.
func (h *Hub) EndStreams() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.stopping {
		h.stopping = true
		close(h.stopped)
	}
}

// Stop ends every stream and the listener, and waits for the listener. It is idempotent and
// safe before Start. Streams stay refused afterwards, even if the listener is started again.
func (h *Hub) Stop() {
	h.EndStreams()
	h.Base.Stop()
}

// Everything is the backfill id (never a backfill's) of a subscription to every event: the
// hub hands it each event it reads, and the stream keeps those its filters keep, so that
// streams of the whole outbox cost one shared read of it, not one each.
const Everything int64 = 0

// Subscribe opens a stream's subscription to one backfill, or to every event (Everything). Subscribe before replaying stored
// events: whatever the hub reads after this call reaches the subscription, and whatever it
// read before is already in the outbox for the replay to find (duplicates are dropped by id).
// A read under way when it subscribes began without it: the events of its backfill that such
// a read cannot hand on make the subscription lagged, so that the stream reads them from the
// outbox (its replay may have come before they could be served).
func (h *Hub) Subscribe(backfillID int64) (*Subscription, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopping {
		return nil, ErrStopped
	}
	if h.count >= h.cfg.MaxStreams {
		h.obs.StreamRejected()
		return nil, ErrTooManyStreams
	}
	s := &Subscription{hub: h, backfillID: backfillID, wake: make(chan struct{}, 1)}
	set := h.subs[backfillID]
	if set == nil {
		set = map[*Subscription]struct{}{}
		h.subs[backfillID] = set
	}
	set[s] = struct{}{}
	h.count++
	h.obs.StreamsOpen(h.count)
	return s, nil
}

// Done is closed when streams must end (the server is shutting down).
func (h *Hub) Done() <-chan struct{} { return h.stopped }

func (h *Hub) unsubscribe(s *Subscription) {
	h.mu.Lock()
	defer h.mu.Unlock()
	set := h.subs[s.backfillID]
	if _, ok := set[s]; !ok {
		return
	}
	delete(set, s)
	if len(set) == 0 {
		delete(h.subs, s.backfillID)
	}
	h.count--
	if h.count == 0 {
		h.lastEnd = time.Now()
	}
	h.obs.StreamsOpen(h.count)
}

func (h *Hub) loop(ctx context.Context) {
	var (
		listener *pq.Listener
		notify   <-chan *pq.Notification
		probe    *prober
		// proven: a probe notification came back on the listener since it last (re)connected.
		proven bool
		// listening is signalled once LISTEN took effect on the first connection; lost whenever
		// the session is gone.
		listening = make(chan struct{}, 1)
		lost      = make(chan struct{}, 1)
	)
	// unlisten lets the LISTEN session and its prober go, when there are.
	unlisten := func() {
		if listener != nil {
			_ = listener.Close()
		}
		if probe != nil {
			probe.close()
		}
		listener, notify, probe = nil, nil, nil
		// A signal of the session let go must not touch the next one.
		drain(listening)
		drain(lost)
	}
	defer unlisten()
	poll := time.NewTicker(h.cfg.PollInterval)
	defer poll.Stop()
	pollEvery := h.cfg.PollInterval
	// setProven moves the poll between its two paces: PollInterval as a safety net under a
	// working LISTEN, FallbackPollInterval as the only wake-up without one.
	setProven := func(ok bool) {
		proven = ok
		want := h.cfg.PollInterval
		if listener != nil && !proven {
			want = h.cfg.FallbackPollInterval
		}
		if want != pollEvery {
			pollEvery = want
			poll.Reset(want)
		}
	}
	sendProbe := func() {
		if err := probe.send(ctx); err != nil && ctx.Err() == nil {
			h.log.Warn("event listener: probe not sent, polling every "+h.cfg.FallbackPollInterval.String(), "err", err)
			setProven(false)
		}
	}
	// reread reads the outbox again while committed events for the streams are held back by
	// an older transaction, or after a read that failed (readOutbox): after heldWait, then
	// less and less often, up to the poll's pace or heldRereadMax, whichever is sooner.
	// Without it such events waited for the next notification, which may not come, or the
	// next poll.
	reread := time.NewTimer(time.Hour)
	reread.Stop()
	defer reread.Stop()
	rereadEvery := time.Duration(0)
	read := func() {
		if !h.readOutbox(ctx) {
			rereadEvery = 0
			reread.Stop()
			return
		}
		rereadEvery = min(nextHeldReread(rereadEvery), pollEvery)
		reread.Reset(rereadEvery)
	}
	reprobe := time.NewTicker(probeEvery)
	defer reprobe.Stop()
	prog := time.NewTicker(h.cfg.ProgressInterval)
	defer prog.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case n := <-notify:
			if n == nil {
				// The connection was re-established: events may have been committed meanwhile,
				// and the new session must prove itself again.
				setProven(false)
				sendProbe()
			} else if n.Channel != Channel {
				if probe.answered(n.Channel, n.Extra) {
					setProven(true)
				}
				continue
			}
			read()
		case <-listening:
			if probe != nil { // nil: the session was let go while it was being set up
				sendProbe()
			}
		case <-lost:
			setProven(false)
		case <-reprobe.C:
			if probe != nil {
				if probe.sent != "" {
					// The last probe never came back: this session delivers nothing.
					setProven(false)
				}
				sendProbe()
			}
		case <-poll.C:
			read()
		case <-reread.C:
			read()
		case <-prog.C:
			// LISTEN while streams are open, and ListenIdle after the last one: a replica
			// nobody follows holds no extra connection, and polls alone (its events only feed
			// the metrics). Listening, it reads the outbox on every notification, which under
			// a steady stream of changes is up to a hundred reads a second, each computing the
			// outbox's horizon: a replica that once had streams paid that for the rest of its
			// life.
			following, lastEnd := h.following()
			if listener != nil && !following && time.Since(lastEnd) >= h.cfg.ListenIdle {
				unlisten()
				setProven(false) // back to PollInterval, the pace of a replica without streams
			} else if listener == nil && h.cfg.DSN != "" && following {
				var err error
				if probe, err = newProber(h.cfg.DSN); err != nil {
					h.log.Error("event listener: DSN", "err", err)
					h.cfg.DSN = "" // the same DSN would fail the same way: poll only
					continue
				}
				listener, notify = h.listen(probe.channel, listening, lost)
				setProven(false)
				read() // what was committed before LISTEN took effect
			}
			h.readProgress(ctx)
		}
	}
}

// drain empties a signal channel of capacity one.
func drain(c <-chan struct{}) {
	select {
	case <-c:
	default:
	}
}

// listen opens the replica's LISTEN connection, on the events channel and on the probe's.
// pq.Listener reconnects and re-listens by itself; until it does, polling carries on. Listen
// blocks until a first connection is made, which may be never: it runs on a goroutine of its
// own (Close ends it), which signals listening when both channels are listened to. lost is
// signalled whenever the session is gone.
func (h *Hub) listen(probeChannel string, listening, lost chan<- struct{}) (*pq.Listener, <-chan *pq.Notification) {
	signal := func(c chan<- struct{}) {
		select {
		case c <- struct{}{}:
		default:
		}
	}
	l := pq.NewListener(h.cfg.DSN, 100*time.Millisecond, 10*time.Second, func(ev pq.ListenerEventType, err error) {
		if ev == pq.ListenerEventDisconnected || ev == pq.ListenerEventConnectionAttemptFailed {
			signal(lost)
		}
		if err != nil {
			h.log.Warn("event listener connection, polling every "+h.cfg.FallbackPollInterval.String()+" until it is back", "event", int(ev), "err", err)
		}
	})
	go func() {
		for _, ch := range []string{Channel, probeChannel} {
			if err := l.Listen(ch); err != nil {
				if !errors.Is(err, net.ErrClosed) {
					h.log.Warn("event listener: LISTEN failed, polling every "+h.cfg.FallbackPollInterval.String(), "err", err)
				}
				return
			}
		}
		signal(listening)
	}()
	return l, l.NotificationChannel()
}
