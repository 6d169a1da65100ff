package main

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// shedWaitMetric is the service's histogram of the time from reading a request to its 503:
// the service's side of a shed request's latency, which on cores shared with the load
// generator is a small part of what the generator measures.
const shedWaitMetric = "backfill_admission_shed_wait_seconds"

// shedWaits is the histogram summed over admission classes: cumulative counts by upper bound.
type shedWaits map[float64]uint64

// scrapeShedWaits reads shedWaitMetric from the service's /metrics.
func (b *bench) scrapeShedWaits(ctx context.Context) (shedWaits, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.svc.base+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	res, err := b.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %s", res.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(res.Body)
	if err != nil {
		return nil, fmt.Errorf("GET /metrics: %w", err)
	}
	waits := shedWaits{}
	if f := families[shedWaitMetric]; f != nil {
		for _, m := range f.GetMetric() {
			h := m.GetHistogram()
			for _, bk := range h.GetBucket() {
				if !math.IsInf(bk.GetUpperBound(), 1) { // the parser may keep +Inf's bucket: the count below is it
					waits[bk.GetUpperBound()] += bk.GetCumulativeCount()
				}
			}
			waits[math.Inf(1)] += h.GetSampleCount()
		}
	}
	return waits, nil
}

// minus is the waits observed since before.
func (w shedWaits) minus(before shedWaits) shedWaits {
	d := make(shedWaits, len(w))
	for le, n := range w {
		d[le] = n - before[le]
	}
	return d
}

// quantile is the upper bound of the bucket that holds quantile q of the waits, and their
// count; 0 when there are none.
func (w shedWaits) quantile(q float64) (time.Duration, uint64) {
	total := w[math.Inf(1)]
	if total == 0 {
		return 0, 0
	}
	bound := math.Inf(1)
	for le, n := range w {
		if float64(n) >= q*float64(total) && le < bound {
			bound = le
		}
	}
	if math.IsInf(bound, 1) {
		return time.Duration(math.MaxInt64), total
	}
	return time.Duration(bound * float64(time.Second)), total
}

// String describes the waits by bucket: "≤ 100ms: 12, …".
func (w shedWaits) String() string {
	bounds := make([]float64, 0, len(w))
	for le := range w {
		bounds = append(bounds, le)
	}
	slices.Sort(bounds)
	var parts []string
	below := uint64(0)
	for _, le := range bounds {
		n := w[le]
		if n == below {
			continue
		}
		label := "more"
		if !math.IsInf(le, 1) {
			label = "≤ " + time.Duration(le*float64(time.Second)).String()
		}
		parts = append(parts, fmt.Sprintf("%s: %d", label, n-below))
		below = n
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}
