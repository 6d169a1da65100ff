package schedule

import (
	"fmt"
	"strings"
	"time"
)

// everyAsCron offers the cron expression for an `@every` descriptor whose interval divides an
// hour or a day evenly (`@every 5m` → `*/5 * * * *`), or "" for any other descriptor. robfig
// knows @every, but it counts from when a process starts, not from the calendar, so a
// backfill could not tell which ticks a window holds; the cron form ticks at the same
// instants every time.
func everyAsCron(descriptor string) string {
	arg, ok := strings.CutPrefix(descriptor, "@every ")
	if !ok {
		return ""
	}
	d, err := time.ParseDuration(strings.TrimSpace(arg))
	if err != nil || d <= 0 || d%time.Minute != 0 {
		return ""
	}
	var expr string
	switch m := int(d / time.Minute); {
	case m == 1:
		expr = "* * * * *"
	case m < 60 && 60%m == 0:
		expr = fmt.Sprintf("*/%d * * * *", m)
	case m == 60:
		expr = "0 * * * *"
	case m%60 == 0 && m < 24*60 && 24%(m/60) == 0:
		expr = fmt.Sprintf("0 */%d * * *", m/60)
	case m == 24*60:
		expr = "0 0 * * *"
	default:
		return ""
	}
	return fmt.Sprintf(`; for %s write %q, which ticks on the clock's %s boundaries`, descriptor, expr, d)
}
