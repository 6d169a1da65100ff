package schedule

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// An unsupported descriptor's error lists the supported ones and, for an @every whose
// interval divides an hour or a day, the cron expression to write instead.
func TestUnsupportedDescriptorListsTheSupportedOnes(t *testing.T) {
	t.Parallel()
	for expr, want := range map[string]string{
		"@every 5m":  `write "*/5 * * * *"`,
		"@every 1h":  `write "0 * * * *"`,
		"@every 6h":  `write "0 */6 * * *"`,
		"@every 24h": `write "0 0 * * *"`,
		"@every 7m":  "",
		"@every 90s": "",
		"@reboot":    "",
		"@Daily":     "",
	} {
		_, err := Parse(expr, "UTC")
		require.ErrorIs(t, err, ErrInvalidSchedule, expr)
		require.Contains(t, err.Error(), "the supported ones are @hourly, @daily, @midnight, @weekly, @monthly, @yearly, @annually", expr)
		if want != "" {
			require.Contains(t, err.Error(), want, expr)
			// What it offers is accepted.
			i := len(`write "`)
			offer := want[i : len(want)-1]
			_, err := Parse(offer, "UTC")
			require.NoError(t, err, offer)
		} else {
			require.NotContains(t, err.Error(), "write \"", expr)
		}
	}
}
