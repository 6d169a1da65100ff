package main

import (
	"math"
	"testing"
	"time"
)

func TestShedWaitsQuantileCountsOnlyTheNewWaits(t *testing.T) {
	inf := math.Inf(1)
	before := shedWaits{0.001: 100, 0.1: 100, 1: 100, inf: 100}
	// 100 new waits: 98 under 1 ms, one under 100 ms, one over 1 s.
	after := shedWaits{0.001: 198, 0.1: 199, 1: 199, inf: 200}
	p99, n := after.minus(before).quantile(0.99)
	if n != 100 || p99 != 100*time.Millisecond {
		t.Fatalf("p99 of 100 new waits: got %v over %d, want 100ms over 100", p99, n)
	}
	if p, _ := after.minus(before).quantile(1); p != time.Duration(math.MaxInt64) {
		t.Fatalf("the largest wait is over every bound: got %v", p)
	}
	if p, n := before.minus(before).quantile(0.99); p != 0 || n != 0 {
		t.Fatalf("nothing new: got %v over %d", p, n)
	}
}
