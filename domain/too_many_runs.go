package domain

import "fmt"

// TooManyRunsError is ErrTooManyRuns with its numbers: the slots the window holds (exactly
// when Exact, else more than Slots: counting past the cap is bounded) and the cap,
// MAX_BACKFILL_RUNS. A person who meets it needs both to pick a smaller window or ask for a
// higher cap.
type TooManyRunsError struct {
	Slots   int
	Exact   bool
	MaxRuns int
}

func (e *TooManyRunsError) Error() string {
	holds := fmt.Sprintf("%d slots", e.Slots)
	if !e.Exact {
		holds = fmt.Sprintf("more than %d slots", e.Slots)
	}
	return fmt.Sprintf("%v: the window has %s and one backfill may have at most %d (MAX_BACKFILL_RUNS): "+
		"split the window into smaller backfills, or raise MAX_BACKFILL_RUNS", ErrTooManyRuns, holds, e.MaxRuns)
}

// Is makes the error ErrTooManyRuns for errors.Is.
func (e *TooManyRunsError) Is(target error) bool { return target == ErrTooManyRuns }
