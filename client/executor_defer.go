package client

import (
	"errors"
	"fmt"
	"time"
)

// OutcomeDeferred is a run handed back with a report of deferred: queued again, with the
// same attempt, for a claim after its retry time.
const OutcomeDeferred RunOutcome = "deferred"

// maxDefer is the service's bound on a deferral (retry_after_seconds ≤ 86,400).
const maxDefer = 24 * time.Hour

// DeferError is what a work function returns (through Defer) to hand its run back because the
// system it works on asked for a pause: a rate-limited API's 429, a warehouse at capacity.
// RunExecutor reports the run deferred: it becomes queued again with its attempt unchanged, and
// no claim hands it out before After has passed.
type DeferError struct {
	// After is how long the run waits: rounded up to whole seconds, within 1 s..24 h.
	After time.Duration
	// Note is kept as the run's note (the service's reason, say).
	Note string
}

// Defer returns a DeferError: a work function's way of asking for its run to be tried again
// after d, without spending an attempt.
func Defer(d time.Duration, note string) error { return &DeferError{After: d, Note: note} }

func (e *DeferError) Error() string {
	if e.Note == "" {
		return fmt.Sprintf("deferred for %s", e.After)
	}
	return fmt.Sprintf("deferred for %s: %s", e.After, e.Note)
}

// deferralOf is the deferral err asks for, clamped to what the service takes; nil if err
// is not a DeferError.
func deferralOf(err error) *DeferError {
	var d *DeferError
	if !errors.As(err, &d) {
		return nil
	}
	return &DeferError{After: min(max(d.After, time.Second), maxDefer), Note: noteOf(d.Note)}
}
