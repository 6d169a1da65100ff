package schedule

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/robfig/cron/v3"
)

var (
	// ErrInvalidSchedule reports a schedule expression that is not accepted.
	ErrInvalidSchedule = errors.New("invalid schedule")
	// ErrInvalidTimezone reports a timezone that is not an IANA name.
	ErrInvalidTimezone = errors.New("invalid timezone")
	// ErrTooManySlots reports a backfill window holding more slots than allowed.
	ErrTooManySlots = errors.New("too many slots")
)

// starBit is robfig's marker for a field written as `*` (or `?`, or a step of 1
// over `*`); it matters only for the day-of-month/day-of-week rule.
const starBit = uint64(1) << 63

// allHours has one bit per hour of the day.
const allHours = uint64(1)<<24 - 1

// presets are the only descriptors accepted; robfig also knows @every, which
// describes durations rather than calendar ticks and so has no slots.
var presets = map[string]bool{}

// presetNames are the presets in the order an error lists them.
var presetNames = []string{"@hourly", "@daily", "@midnight", "@weekly", "@monthly", "@yearly", "@annually"}

func init() {
	for _, p := range presetNames {
		presets[p] = true
	}
}

// neverFiresProbe is the fixed instant after which a schedule must tick within
// searchLimit to be accepted (2000-01-01T00:00:00Z, a leap year, so that
// February 29th schedules are found).
const neverFiresProbe = 946684800

// Schedule is a parsed schedule in its timezone. It is immutable and safe for
// concurrent use.
type Schedule struct {
	loc *time.Location

	// Bit i set means value i matches; star bits are stripped.
	minute, hour, dom, month, dow uint64
	// domStar and dowStar select cron's day rule: if either field was `*` a
	// day must match both fields, otherwise either.
	domStar, dowStar bool
	// fixed is set unless the hour field matches every hour; fixed schedules
	// map each local wall time to one instant, the others match local clock
	// readings of instants.
	fixed bool
}

// Parse validates and compiles a schedule in a timezone. The expression is a
// standard 5-field cron expression or one of @hourly, @daily, @midnight,
// @weekly, @monthly, @yearly and @annually; the timezone is an IANA name (or
// "UTC"). Errors wrap ErrInvalidSchedule or ErrInvalidTimezone.
func Parse(expr, timezone string) (*Schedule, error) {
	spec, err := parseSpec(expr)
	if err != nil {
		return nil, err
	}
	loc, err := loadLocation(timezone)
	if err != nil {
		return nil, err
	}
	s := &Schedule{
		loc:     loc,
		minute:  spec.Minute &^ starBit,
		hour:    spec.Hour &^ starBit,
		dom:     spec.Dom &^ starBit,
		month:   spec.Month &^ starBit,
		dow:     spec.Dow &^ starBit,
		domStar: spec.Dom&starBit != 0,
		dowStar: spec.Dow&starBit != 0,
	}
	s.fixed = s.hour&allHours != allHours
	it := ticker{s: s}
	if _, ok := it.atOrAfter(neverFiresProbe); !ok {
		return nil, fmt.Errorf("%w: %q never fires", ErrInvalidSchedule, expr)
	}
	return s, nil
}

// parseSpec accepts exactly the subset of robfig's syntax that names calendar
// ticks, and filters out input robfig would mishandle (its TZ= prefix parsing
// panics on "TZ=UTC" without a following space).
func parseSpec(expr string) (*cron.SpecSchedule, error) {
	e := strings.TrimSpace(expr)
	switch {
	case e == "":
		return nil, fmt.Errorf("%w: empty expression", ErrInvalidSchedule)
	case strings.HasPrefix(e, "@"):
		if !presets[e] {
			return nil, fmt.Errorf("%w: unsupported descriptor %q; the supported ones are %s, "+
				"or write a 5-field cron expression (minute hour day-of-month month day-of-week)%s",
				ErrInvalidSchedule, e, strings.Join(presetNames, ", "), everyAsCron(e))
		}
	case strings.Contains(e, "="):
		return nil, fmt.Errorf("%w: timezone prefixes are not accepted, use the timezone field: %q", ErrInvalidSchedule, e)
	default:
		if n := len(strings.Fields(e)); n != 5 {
			return nil, fmt.Errorf("%w: expected 5 fields (minute hour day-of-month month day-of-week), found %d: %q", ErrInvalidSchedule, n, e)
		}
	}
	sched, err := cron.ParseStandard(e)
	if err != nil {
		return nil, fmt.Errorf("%w: %q: %v", ErrInvalidSchedule, e, err)
	}
	spec, ok := sched.(*cron.SpecSchedule)
	if !ok {
		return nil, fmt.Errorf("%w: %q is not a calendar schedule", ErrInvalidSchedule, e)
	}
	if spec.Second&^starBit != 1 {
		// ParseStandard always fixes seconds at 0; anything else would mean a
		// robfig change we do not model.
		return nil, fmt.Errorf("%w: %q fires at a non-zero second", ErrInvalidSchedule, e)
	}
	return spec, nil
}

// locations caches loaded zones: time.LoadLocation reads and decodes a zoneinfo
// file on every call, and Parse runs on request paths. Only successes are
// stored, so the cache is bounded by the number of IANA names.
var locations sync.Map // string -> *time.Location

func loadLocation(name string) (*time.Location, error) {
	if name == "" || name == "Local" {
		// "" and "Local" mean UTC or the host's zone to LoadLocation; a DAG's
		// ticks must not depend on where the service runs.
		return nil, fmt.Errorf("%w: %q is not an IANA timezone name", ErrInvalidTimezone, name)
	}
	if loc, ok := locations.Load(name); ok {
		return loc.(*time.Location), nil
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("%w: %q is not an IANA time zone name%s", ErrInvalidTimezone, name, didYouMean(name))
	}
	locations.Store(name, loc)
	return loc, nil
}
