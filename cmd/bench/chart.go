package main

import (
	"fmt"
	"math"
	"os"
	"strings"
	"time"
)

// writeChart draws creation time against N on log-log axes for the service, the COPY floor
// and the row-by-row baseline, as a self-contained SVG (no dependencies, diffs as text).
// On log-log axes a straight line of slope 1 is linear growth.
func writeChart(path string, c createResult) error {
	const (
		width, height          = 720, 440
		left, right, top, bott = 80, 90, 40, 60
	)
	type series struct {
		name, color string
		times       func(sizeResult) []time.Duration
	}
	all := []series{
		{"service (POST over HTTP)", "#1f77b4", func(s sizeResult) []time.Duration { return s.service }},
		{"COPY floor", "#2ca02c", func(s sizeResult) []time.Duration { return s.floor }},
		{"row-by-row INSERTs", "#d62728", func(s sizeResult) []time.Duration { return s.rowByRow }},
	}
	minN, maxN := float64(c.sizes[0].n), float64(c.largest().n)
	minT, maxT := math.Inf(1), 0.0
	for _, s := range c.sizes {
		for _, se := range all {
			ms := float64(median(se.times(s))) / float64(time.Millisecond)
			minT, maxT = math.Min(minT, ms), math.Max(maxT, ms)
		}
	}
	x0, x1 := math.Floor(math.Log10(minN)), math.Ceil(math.Log10(maxN))
	y0, y1 := math.Floor(math.Log10(minT)), math.Ceil(math.Log10(maxT))
	if x1 == x0 {
		x1++
	}
	if y1 == y0 {
		y1++
	}
	px := func(n float64) float64 {
		return left + (math.Log10(n)-x0)/(x1-x0)*float64(width-left-right)
	}
	py := func(ms float64) float64 {
		return float64(height-bott) - (math.Log10(ms)-y0)/(y1-y0)*float64(height-top-bott)
	}

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%d" y="22" font-size="15" font-weight="bold">Backfill creation time against slots (log-log, median)</text>`+"\n", left)
	// Decade grid lines and labels.
	for e := x0; e <= x1; e++ {
		x := px(math.Pow(10, e))
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/>`+"\n", x, top, x, height-bott)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", x, height-bott+18, count(int(math.Pow(10, e))))
	}
	for e := y0; e <= y1; e++ {
		y := py(math.Pow(10, e))
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>`+"\n", left, y, width-right, y)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", left-8, y+4, decade(math.Pow(10, e)))
	}
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#333"/>`+"\n", left, top, width-left-right, height-top-bott)
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">slots in the backfill (N)</text>`+"\n", left+(width-left-right)/2, height-18)
	fmt.Fprintf(&b, `<text transform="translate(18 %d) rotate(-90)" text-anchor="middle">creation time</text>`+"\n", top+(height-top-bott)/2)

	for i, se := range all {
		var pts []string
		for _, s := range c.sizes {
			ms := float64(median(se.times(s))) / float64(time.Millisecond)
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(float64(s.n)), py(ms)))
		}
		fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>`+"\n", strings.Join(pts, " "), se.color)
		for j, s := range c.sizes {
			ms := float64(median(se.times(s))) / float64(time.Millisecond)
			fill := se.color
			if i == 2 && s.rowByRowEstimated {
				fill = "white" // an open marker: extrapolated, not measured
			}
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="4" fill="%s" stroke="%s" stroke-width="2"><title>%s, %s slots: %s</title></circle>`+"\n",
				px(float64(s.n)), py(ms), fill, se.color, se.name, count(s.n), dur(median(se.times(s))))
			if j == len(c.sizes)-1 {
				fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" fill="%s">%s</text>`+"\n", px(float64(s.n))+8, py(ms)+4, se.color, dur(median(se.times(s))))
			}
		}
		// The legend sits top left, where rising lines never go.
		ly := top + 18 + i*20
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"/>`+"\n", left+12, ly, left+36, ly, se.color)
		fmt.Fprintf(&b, `<text x="%d" y="%d">%s</text>`+"\n", left+42, ly+4, se.name)
	}
	if c.largest().rowByRowEstimated {
		fmt.Fprintf(&b, `<text x="%d" y="%d" fill="#555">open marker: extrapolated, not measured</text>`+"\n", left+12, top+18+3*20+4)
	}
	b.WriteString("</svg>\n")
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// decade labels a power of ten of milliseconds: 10 ms, 100 ms, 1 s, 10 s.
func decade(ms float64) string {
	if ms >= 1000 {
		return fmt.Sprintf("%g s", ms/1000)
	}
	if ms >= 1 {
		return fmt.Sprintf("%g ms", ms)
	}
	return fmt.Sprintf("%g µs", ms*1000)
}
