package schedule

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// An unknown time zone's error offers the nearest real names; a name nothing resembles gets
// an example instead of a guess.
func TestUnknownTimezoneSuggestsTheNearestNames(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]string{
		"Europe/Berln":     `did you mean "Europe/Berlin"?`,
		"europe/berlin":    `did you mean "Europe/Berlin"?`,
		"Berlin":           `did you mean "Europe/Berlin"?`,
		"America/New York": `did you mean "America/New_York"?`,
		"Asia/Calcuta":     `did you mean "Asia/Calcutta"`,
		"Mars/Olympus":     `use an IANA name such as "Europe/Berlin" or "UTC"`,
	} {
		_, err := Parse("@daily", name)
		require.ErrorIs(t, err, ErrInvalidTimezone, name)
		require.Contains(t, err.Error(), want, name)
	}
}

// Every suggested name loads: the generated list holds only names the toolchain's tz
// database has (go generate ./schedule refreshes it).
func TestZoneNamesAllLoad(t *testing.T) {
	t.Parallel()
	require.Greater(t, len(zoneNames), 400)
	for _, n := range zoneNames {
		_, err := time.LoadLocation(n)
		require.NoError(t, err, n)
	}
}
