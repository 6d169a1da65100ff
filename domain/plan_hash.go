package domain

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"slices"
	"strconv"
	"time"
)

// ErrPlanChanged means the plan made inside the creating transaction is not the one the
// client bound the request to with If-Match.
var ErrPlanChanged = errors.New("plan changed")

// PlanChangedError carries the digest of the plan as it is now.
type PlanChangedError struct {
	CurrentPlanHash string
}

func (e *PlanChangedError) Error() string { return ErrPlanChanged.Error() }

// Is lets callers match with errors.Is(err, ErrPlanChanged).
func (e *PlanChangedError) Is(target error) bool { return target == ErrPlanChanged }

// PlanHash digests a plan: the DAG's schedule and timezone and, in sort order, every slot's
// logical date, action and skip reason. The dry run answers it and creation recomputes it
// from the slots it settled inside its own transaction, so equal digests mean the backfill
// was created exactly as previewed. Every field is length-prefixed, so no two different
// plans can spell the same byte stream.
func PlanHash(sched, timezone string, slots []PlannedSlot) string {
	h := sha256.New()
	buf := make([]byte, 0, 128)
	field := func(s string) {
		buf = strconv.AppendInt(buf, int64(len(s)), 10)
		buf = append(buf, ':')
		buf = append(buf, s...)
	}
	buf = append(buf, "plan/v1;"...)
	field(sched)
	field(timezone)
	h.Write(buf)
	for _, sl := range slots {
		buf = buf[:0]
		field(sl.LogicalDate.UTC().Format(time.RFC3339Nano))
		field(string(sl.Action))
		if sl.ExceptionReason != nil {
			field(*sl.ExceptionReason)
		} else {
			buf = append(buf, '-')
		}
		h.Write(buf)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// CheckPlan compares the settled plan with the digests the request was bound to (nil binds
// nothing) and returns the digest to store, or a *PlanChangedError.
func CheckPlan(sched, timezone string, slots []PlannedSlot, ifMatch []string) (string, error) {
	sum := PlanHash(sched, timezone, slots)
	if ifMatch != nil && !slices.Contains(ifMatch, sum) {
		return "", &PlanChangedError{CurrentPlanHash: sum}
	}
	return sum, nil
}
