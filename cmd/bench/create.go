package main

import (
	"context"
	"fmt"
	"math"
	"time"
)

// sizeResult holds every creation time measured at one N.
type sizeResult struct {
	n                 int
	service, floor    []time.Duration
	rowByRow          []time.Duration
	rowByRowEstimated bool // the largest row-by-row was extrapolated, not run
}

// createResult is P1.
type createResult struct {
	sizes         []sizeResult
	lastServiceID int64 // a backfill of the largest N, for P2
}

func (c createResult) largest() sizeResult { return c.sizes[len(c.sizes)-1] }

// slope is the exponent k of t ∝ N^k between two sizes: 1 is linear, below 1 better.
func slope(a, b sizeResult, times func(sizeResult) []time.Duration) float64 {
	return math.Log(float64(median(times(b)))/float64(median(times(a)))) / math.Log(float64(b.n)/float64(a.n))
}

// memResult is P5: the service's RSS at rest and its peak while creating the largest N.
type memResult struct {
	rest, peak int64
	err        error // /proc unavailable: P5 is reported as not measured
}

// scenarioCreate is P1 (and P5 around its largest size): for each N, rounds of the service's
// POST alternating with the COPY floor's transaction (the first of each pair alternates too,
// so neither side always runs on a warmer cache), then the row-by-row baseline.
func (b *bench) scenarioCreate(ctx context.Context) (createResult, memResult, error) {
	var res createResult
	var mem memResult
	// At rest: after the warm-up, with the service idle for a moment.
	time.Sleep(500 * time.Millisecond)
	rest, err := b.svc.memory()
	mem.rest, mem.err = rest.rss, err

	for si, n := range b.cfg.sizes {
		largest := si == len(b.cfg.sizes)-1
		if largest && mem.err == nil {
			mem.err = b.svc.resetPeak()
		}
		sr := sizeResult{n: n}
		for r := range b.cfg.rounds {
			w := newWindow(fmt.Sprintf("p1_%d_%d", n, r), n)
			serviceFirst := r%2 == 0
			for _, svcTurn := range []bool{serviceFirst, !serviceFirst} {
				if svcTurn {
					d, id, err := b.serviceCreate(ctx, w, 10)
					if err != nil {
						return res, mem, fmt.Errorf("service, %d slots: %w", n, err)
					}
					sr.service = append(sr.service, d)
					res.lastServiceID = id
				} else {
					d, _, err := b.floorCreate(ctx, w, 10)
					if err != nil {
						return res, mem, fmt.Errorf("COPY floor, %d slots: %w", n, err)
					}
					sr.floor = append(sr.floor, d)
				}
			}
			b.log.Printf("P1 %6d slots round %d: service %v, COPY floor %v", n, r+1,
				sr.service[r].Round(time.Millisecond), sr.floor[r].Round(time.Millisecond))
		}
		if largest && mem.err == nil {
			var m memory
			m, mem.err = b.svc.memory()
			mem.peak = m.hwm
		}
		if err := b.rowByRowRounds(ctx, &sr, res.sizes, largest); err != nil {
			return res, mem, err
		}
		res.sizes = append(res.sizes, sr)
	}
	return res, mem, nil
}

// rowByRowRounds measures the baseline at one size. The largest size runs once, and only if
// the previous size predicts it under the limit; otherwise it is extrapolated linearly from
// that size (row-by-row cost is linear: every row is one round trip) and marked as such.
func (b *bench) rowByRowRounds(ctx context.Context, sr *sizeResult, done []sizeResult, largest bool) error {
	rounds := b.cfg.rowByRowRounds
	if largest && len(done) > 0 {
		prev := done[len(done)-1]
		perSlot := float64(median(prev.rowByRow)) / float64(prev.n)
		estimate := time.Duration(perSlot * float64(sr.n))
		if estimate >= b.cfg.rowByRowLimit {
			sr.rowByRow = []time.Duration{estimate}
			sr.rowByRowEstimated = true
			b.log.Printf("P1 %6d slots row-by-row: estimated %v from %d slots (over the %v limit)", sr.n,
				estimate.Round(time.Millisecond), prev.n, b.cfg.rowByRowLimit)
			return nil
		}
		rounds = 1
	}
	for r := range rounds {
		d, err := b.rowByRow(ctx, newWindow(fmt.Sprintf("p1rbr_%d_%d", sr.n, r), sr.n))
		if err != nil {
			return fmt.Errorf("row-by-row, %d slots: %w", sr.n, err)
		}
		sr.rowByRow = append(sr.rowByRow, d)
		b.log.Printf("P1 %6d slots row-by-row round %d: %v", sr.n, r+1, d.Round(time.Millisecond))
	}
	return nil
}
