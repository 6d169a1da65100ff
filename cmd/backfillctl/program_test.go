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

// Template names are matched as written: a bare word between the braces that is not one of
// the four names, in any case or with any suffix, is refused before anything is claimed,
// while brace text of another template language passes through.
func TestCheckTemplatesRefusesUnknownNamesCaseSensitively(t *testing.T) {
	for _, arg := range []string{"{{ DS }}", "{{ds1}}", "--day={{ Run_Id }}", "{{conf}}{{ CONF }}", "{{ _ds }}"} {
		err := checkTemplates([]string{"ok", arg})
		require.Error(t, err, "%q", arg)
		require.Contains(t, err.Error(), "unknown template")
	}
	for _, arg := range []string{"{{ ds }}", "{{ds}}", "{{run_id}}-{{ logical_date }}", "{{  conf  }}", "{{.State}}", "{{ json . }}", "{ds}"} {
		require.NoError(t, checkTemplates([]string{arg}), "%q", arg)
	}
	err := checkTemplates([]string{"{{ DS }}"})
	require.ErrorContains(t, err, "{{ ds }}", "the message names the template the user likely meant")
}
