// Package schedule turns a DAG's cron schedule and IANA timezone into ticks
// (the instants at which runs are due) and backfill slots.
//
// The DST contract: ticks are instants. A schedule whose hour field matches
// every hour ticks whenever the local clock matches its other fields, so an
// hourly schedule stays one real hour apart through DST changes (the skipped
// hour has no ticks, the repeated hour ticks twice). Any other schedule ticks
// once per matching local wall time: a wall time that does not exist (spring
// forward) is taken as the same wall time after the shift (02:30 → 03:30), and
// a wall time that occurs twice (fall back) is taken at its first occurrence.
package schedule
