package metrics

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

// gathered is the value of each series of the registry, by "name{label value}".
func gathered(t *testing.T, m *Metrics) map[string]float64 {
	t.Helper()
	families, err := m.registry.Gather()
	require.NoError(t, err)
	out := map[string]float64{}
	for _, f := range families {
		for _, s := range f.GetMetric() {
			key := f.GetName()
			for _, l := range s.GetLabel() {
				key += "{" + l.GetValue() + "}"
			}
			out[key] = s.GetCounter().GetValue()
			if s.GetGauge() != nil {
				out[key] = s.GetGauge().GetValue()
			}
		}
	}
	return out
}

// A scrape reports what the read answers; one whose read fails reports none of the gauges
// (never the last ones) and counts the failure.
func TestScrapeGaugesReportTheReadOrNothing(t *testing.T) {
	m := New()
	var fail bool
	m.WatchPools(func(context.Context) (map[string]PoolFigures, error) {
		if fail {
			return nil, errors.New("database away")
		}
		return map[string]PoolFigures{"etl": {Slots: 4, Running: 3, Queued: 7}}, nil
	})
	m.WatchStates(func(context.Context) (map[string]int64, map[string]int64, error) {
		if fail {
			return nil, nil, errors.New("database away")
		}
		return map[string]int64{"running": 2}, map[string]int64{"queued": 5}, nil
	})

	got := gathered(t, m)
	for key, want := range map[string]float64{
		"backfill_pool_slots{etl}": 4, "backfill_pool_running{etl}": 3, "backfill_pool_queued{etl}": 7,
		"backfill_backfills_active{running}": 2, "backfill_runs_unfinished{queued}": 5,
		"backfill_pool_gauge_errors_total": 0, "backfill_state_gauge_errors_total": 0,
	} {
		require.Contains(t, got, key)
		require.Equal(t, want, got[key], key)
	}

	fail = true
	got = gathered(t, m)
	for _, key := range []string{"backfill_pool_slots{etl}", "backfill_backfills_active{running}", "backfill_runs_unfinished{queued}"} {
		require.NotContains(t, got, key, "reported by a scrape that could not read")
	}

	// A scrape gathers the failure counters alongside the gauges, so the next one shows the
	// failure counted.
	fail = false
	got = gathered(t, m)
	require.Equal(t, 1.0, got["backfill_pool_gauge_errors_total"])
	require.Equal(t, 1.0, got["backfill_state_gauge_errors_total"])
	require.Contains(t, got, "backfill_pool_slots{etl}", "a scrape that can read reports again")
}
