package sweeper

import (
	"context"
	"log/slog"
	"time"

	"github.com/backfillsvc/backfill/internal/startstop"
)

// DefaultSummarizeInterval is how often each replica summarizes the outbox's bloom index. A
// read of one backfill's events looks at every unsummarized page range whole: a second of
// events at most, where the sweep's interval would leave five.
const DefaultSummarizeInterval = time.Second

// Summarizer is a start/stop background service that summarizes the full page ranges of the
// outbox's bloom index every interval (repo.Store.SummarizeEventTail, one replica at a time).
type Summarizer struct {
	startstop.Base

	summarize func(ctx context.Context) (int, error)
	interval  time.Duration
	log       *slog.Logger
}

// NewSummarizer returns a stopped Summarizer that calls summarize every interval
// (DefaultSummarizeInterval when zero).
func NewSummarizer(summarize func(ctx context.Context) (int, error), interval time.Duration, log *slog.Logger) *Summarizer {
	if interval <= 0 {
		interval = DefaultSummarizeInterval
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Summarizer{summarize: summarize, interval: interval, log: log}
	s.Init(s.loop, nil)
	return s
}

func (s *Summarizer) loop(ctx context.Context) {
	ticker := time.NewTicker(s.interval)
	defer ticker.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		tctx, cancel := context.WithTimeout(ctx, 10*s.interval)
		_, err := s.summarize(tctx)
		cancel()
		switch {
		case err != nil && ctx.Err() == nil && !failing:
			// Reads by backfill stay right, only slower, until it works again: said once.
			s.log.Warn("outbox summary failed; reads by backfill look at more pages until it works", "err", err)
			failing = true
		case err == nil && failing:
			s.log.Info("outbox summary works again")
			failing = false
		}
	}
}
