package schedule

import (
	"testing"
	"time"
)

// BenchmarkSlots100k lists 100,000 every-minute slots (about 69 days; in New
// York the window crosses the March DST change).
func BenchmarkSlots100k(b *testing.B) {
	for _, tz := range []string{"UTC", "America/New_York"} {
		b.Run(tz, func(b *testing.B) {
			s, err := Parse("* * * * *", tz)
			if err != nil {
				b.Fatal(err)
			}
			from := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
			to := from.Add(99_999 * time.Minute)
			now := to.Add(time.Minute)
			b.ReportAllocs()
			for b.Loop() {
				slots, err := s.Slots(from, to, now, 100_000)
				if err != nil || len(slots) != 100_000 {
					b.Fatalf("%d slots, err %v", len(slots), err)
				}
			}
		})
	}
}
