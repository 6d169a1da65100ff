package events

import (
	"context"
	"log/slog"
	"time"

	"github.com/backfillsvc/backfill/internal/startstop"
)

// notifyStatement wakes the hubs. PostgreSQL serialises the commits of notifying
// transactions (a lock held through the commit's WAL flush), which is why the outbox's
// writers no longer notify themselves (migrations/00014_events_without_lock.sql): here one
// small transaction per replica at a time pays for it, without waiting for the flush, since a
// notification lost in a crash costs only a poll.
//
// It is one statement, its own transaction (set_config's is_local lasts until its commit),
// and not "BEGIN; SET LOCAL ...; SELECT pg_notify(...); COMMIT": when pg_notify is refused (a
// standby, reached during a failover before HAProxy's check moved) the rest of that string is
// skipped, and the pooled session stayed inside a failed transaction block that lib/pq does
// not notice: every later request on it would be answered 25P02, a 500.
const notifyStatement = `SELECT set_config('synchronous_commit', 'off', true), pg_notify('` + Channel + `', '')`

// notifyStatementOn is notifyStatement on another channel.
func notifyStatementOn(channel string) string {
	return `SELECT set_config('synchronous_commit', 'off', true), pg_notify('` + channel + `', '')`
}

// DefaultNotifyGap is the least time between two notifications of one replica: kicks within
// it are folded into one, so that a burst of changes costs one NOTIFY.
const DefaultNotifyGap = 10 * time.Millisecond

// Notifier sends the NOTIFY that wakes the hubs of every replica after this replica changed
// something that may have written events. Kick never blocks: kicks while a notification is
// pending are folded into it.
type Notifier struct {
	startstop.Base
	exec func(ctx context.Context) error
	gap  time.Duration
	log  *slog.Logger
	kick chan struct{}
}

// NewNotifier returns a Notifier that sends with exec (one call: notifyStatement on a pooled
// connection) at most once every gap (DefaultNotifyGap when zero).
func NewNotifier(exec func(ctx context.Context, statement string) error, gap time.Duration, log *slog.Logger) *Notifier {
	return newNotifier(notifyStatement, exec, gap, log)
}

// NewClaimableNotifier is NewNotifier on ClaimableChannel: it wakes the waiting claims of
// every replica (ClaimWaker) after this replica changed something that may make runs
// claimable.
func NewClaimableNotifier(exec func(ctx context.Context, statement string) error, gap time.Duration, log *slog.Logger) *Notifier {
	return newNotifier(notifyStatementOn(ClaimableChannel), exec, gap, log)
}

func newNotifier(statement string, exec func(ctx context.Context, statement string) error, gap time.Duration, log *slog.Logger) *Notifier {
	if gap <= 0 {
		gap = DefaultNotifyGap
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	n := &Notifier{gap: gap, log: log, kick: make(chan struct{}, 1)}
	n.exec = func(ctx context.Context) error { return exec(ctx, statement) }
	n.Init(n.loop, nil)
	return n
}

// Kick asks for a notification soon. Safe before Start and after Stop (it is then dropped
// or sent by the next Start).
func (n *Notifier) Kick() {
	select {
	case n.kick <- struct{}{}:
	default:
	}
}

// notifyRetryMax bounds the wait before a notification that failed is sent again.
const notifyRetryMax = 2 * time.Second

func (n *Notifier) loop(ctx context.Context) {
	failures := 0
	for {
		if failures == 0 {
			select {
			case <-ctx.Done():
				return
			case <-n.kick:
			}
		}
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := n.exec(sctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		wait := n.gap
		if err != nil {
			// The hubs' polls deliver the events anyway, but a poll may be far off: a hub
			// whose LISTEN works polls only every EVENT_POLL_INTERVAL. Send it again, less
			// and less often while the database refuses (a failover), until one goes through;
			// kicks meanwhile are folded into it.
			failures++
			wait = min(n.gap<<min(failures, 10), notifyRetryMax)
			if failures == 1 {
				n.log.Warn("event notification not sent, sending again", "err", err)
			}
		} else if failures > 0 {
			n.log.Info("event notification sent again", "failures", failures)
			failures = 0
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		if failures > 0 {
			drain(n.kick) // folded into the notification about to be sent again
		}
	}
}
