package defaults

import (
	"testing"
	"time"
)

func TestPositiveFillsOnlyUnsetValues(t *testing.T) {
	for _, c := range []struct{ in, want time.Duration }{
		{0, time.Second}, {-time.Millisecond, time.Second}, {time.Millisecond, time.Millisecond},
	} {
		v := c.in
		Positive(&v, time.Second)
		if v != c.want {
			t.Errorf("Positive(%v, 1s) = %v, want %v", c.in, v, c.want)
		}
	}
	n := 3
	Positive(&n, 7)
	if n != 3 {
		t.Errorf("Positive(3, 7) = %d, want 3", n)
	}
}
