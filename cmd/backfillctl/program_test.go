package main

import (
	"testing"
	"time"

	"github.com/backfillsvc/backfill/client"
	"github.com/stretchr/testify/require"
)

// A program learns its run's logical date whole: runs a microsecond apart get different
// values (the service keeps microseconds), and a whole second is written without a fraction.
func TestRunValuesKeepTheLogicalDatesFraction(t *testing.T) {
	for _, c := range []struct {
		at   time.Time
		want string
	}{
		{time.Date(2024, 3, 10, 12, 0, 0, 1000, time.UTC), "2024-03-10T12:00:00.000001Z"},
		{time.Date(2024, 3, 10, 12, 0, 0, 500_000_000, time.UTC), "2024-03-10T12:00:00.5Z"},
		{time.Date(2024, 3, 10, 12, 0, 0, 0, time.FixedZone("", 3600)), "2024-03-10T11:00:00Z"},
	} {
		v := valuesOf(client.DagRun{RunId: "r", LogicalDate: c.at, Attempt: 1})
		require.Equal(t, c.want, v.LogicalDate)
		require.Equal(t, c.want, v.expand("{{ logical_date }}"))
		require.Contains(t, v.env(), "BACKFILL_LOGICAL_DATE="+c.want)
		require.Equal(t, c.want, instant(c.at))
	}
}
