package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"
)

// results is everything one run measured.
// A scenario left out with -only is nil.
type results struct {
	create *createResult
	memory *memResult
	status *statusResult
	// statusCPU is P2's target, CPU per GET against the floor handler.
	statusCPU *statusCPUResult
	claims    *claimResult
	sweep     *sweepResult
	bulk      *bulkResult
	// streams is P8.
	streams *streamsResult
	// overload is P7.
	overload *overloadResult
	// eventWriters is P9.
	eventWriters *eventWritersResult
	// poolBusy is P10.
	poolBusy *poolBusyResult
	// groups is P11.
	groups *groupsResult
	// eventsCost is P12.
	eventsCost *eventsCostResult
}

// Targets of P1–P5.
const (
	targetCreateVsCopy = 1.25 // service ≤ 1.25 × COPY floor at the largest N
	targetVsRowByRow   = 20.0 // service ≥ 20 × faster than row-by-row at the largest N
	targetGrowth       = 1.10 // t ∝ N^k with k ≤ 1.1: linear or better, with room for noise
	targetStatusP50    = 1.2  // 100k-run p50 ≤ 1.2 × 5-run p50
	targetSweep        = 1.3  // large-history pass ≤ 1.3 × small-history pass
	targetMemoryMiB    = 200  // peak ≤ 200 MiB above rest
)

// row is one line of the table. result is PASS, MISS, or "—" for a figure without a target.
type row struct{ scenario, service, floor, ratio, target, result string }

func verdict(ok bool) string {
	if ok {
		return "PASS"
	}
	return "MISS"
}

// printReport writes the hardware, then the table, as Markdown that also reads in a terminal.
func printReport(w io.Writer, cfg config, hw *hardware, r *results) {
	fmt.Fprintf(w, "\n## Backfill service benchmarks, %s\n\n", hw.Date.Format("2006-01-02 15:04 MST"))
	if cfg.smoke {
		fmt.Fprintf(w, "**SMOKE MODE**: tiny sizes, 1 round, %v of load; the figures mean nothing.\n\n", cfg.loadDuration)
	}
	fmt.Fprintf(w, "- CPU: %s, %d cores; memory %.1f GiB; %s\n", hw.CPU, hw.Cores, float64(hw.MemBytes)/(1<<30), hw.OS)
	fmt.Fprintf(w, "- PostgreSQL %s (%s), same machine, over TCP on localhost\n", hw.PostgreSQL, hw.PGSettings)
	fmt.Fprintf(w, "- %s; the load generator, the service and PostgreSQL share the machine\n", hw.Go)
	fmt.Fprintf(w, "- whole run: %v\n\n", hw.Elapsed.Round(time.Second))

	var rows []row
	if r.create != nil {
		rows = append(rows, createRows(*r.create)...)
	}
	if r.statusCPU != nil {
		rows = append(rows, statusCPURows(*r.statusCPU)...)
	}
	if r.status != nil {
		rows = append(rows, statusRows(*r.status)...)
	}
	if r.sweep != nil {
		rows = append(rows, sweepRows(*r.sweep)...)
	}
	if r.claims != nil {
		rows = append(rows, claimRows(*r.claims)...)
	}
	if r.create != nil {
		rows = append(rows, memoryRows(*r.create, *r.memory))
	}
	if r.bulk != nil {
		rows = append(rows, bulkRows(*r.bulk)...)
	}
	if r.streams != nil {
		rows = append(rows, streamsRows(*r.streams)...)
	}
	if r.overload != nil {
		rows = append(rows, overloadRows(*r.overload)...)
	}
	if r.eventWriters != nil {
		rows = append(rows, eventWritersRows(*r.eventWriters)...)
	}
	if r.poolBusy != nil {
		rows = append(rows, poolBusyRows(*r.poolBusy)...)
	}
	if r.groups != nil {
		rows = append(rows, groupsRows(*r.groups)...)
	}
	if r.eventsCost != nil {
		rows = append(rows, eventsCostRows(*r.eventsCost)...)
	}
	writeTable(w, []string{"scenario", "service", "floor / baseline", "ratio", "target", "result"}, rows)

	if r.create != nil {
		creationPerSlot(w, *r.create)
	}
	if st := r.status; st != nil && st.svcCPU > 0 {
		fmt.Fprintf(w, "\nCPU per request in P2 (%d cores shared by all three): the service %s, the load generator %s per GET "+
			"(the floor's load generator %s per SELECT); PostgreSQL has the rest.\n",
			hw.Cores, dur(st.svcCPU), dur(st.genCPU), dur(st.floorGenCPU))
	}
	if o := r.overload; o != nil && o.over.svcCPU > 0 {
		fmt.Fprintf(w, "\nCPU per answer in P7 (vegeta as the client, on the same %d cores): closed loop (C): the service %s, "+
			"the load generator %s; at 2×C (served or shed): the service %s, the load generator %s.\n",
			hw.Cores, dur(o.closed.svcCPU), dur(o.closed.genCPU), dur(o.over.svcCPU), dur(o.over.genCPU))
	}
	fmt.Fprintln(w)
}

func creationPerSlot(w io.Writer, c createResult) {
	fmt.Fprintf(w, "\nCreation time per slot (median):\n\n")
	for _, s := range c.sizes {
		est := ""
		if s.rowByRowEstimated {
			est = " (extrapolated)"
		}
		fmt.Fprintf(w, "- %s slots: service %.1f µs, COPY floor %.1f µs, row-by-row %.1f µs%s\n", count(s.n),
			perSlot(median(s.service), s.n), perSlot(median(s.floor), s.n), perSlot(median(s.rowByRow), s.n), est)
	}
}

func createRows(c createResult) []row {
	var rows []row
	last := len(c.sizes) - 1
	for i, s := range c.sizes {
		ratio := float64(median(s.service)) / float64(median(s.floor))
		rw := row{fmt.Sprintf("P1 POST backfill, %s slots, vs COPY (median of %d)", count(s.n), len(s.service)),
			dur(median(s.service)), dur(median(s.floor)), ratioStr(ratio), "—", "—"}
		if i == last {
			rw.target, rw.result = fmt.Sprintf("≤ %.2f", targetCreateVsCopy), verdict(ratio <= targetCreateVsCopy)
		}
		rows = append(rows, rw)
	}
	for i, s := range c.sizes {
		speedup := float64(median(s.rowByRow)) / float64(median(s.service))
		base := dur(median(s.rowByRow))
		if s.rowByRowEstimated {
			base += " (extrapolated)"
		}
		rw := row{fmt.Sprintf("P1 POST backfill, %s slots, vs row-by-row (%d round%s)", count(s.n), len(s.rowByRow), plural(len(s.rowByRow))),
			dur(median(s.service)), base, fmt.Sprintf("%.1f× faster", speedup), "—", "—"}
		if i == last {
			rw.target, rw.result = fmt.Sprintf("≥ %.0f× faster", targetVsRowByRow), verdict(speedup >= targetVsRowByRow)
		}
		rows = append(rows, rw)
	}
	if len(c.sizes) >= 2 {
		a, b := c.sizes[last-1], c.sizes[last]
		svc := slope(a, b, func(s sizeResult) []time.Duration { return s.service })
		flr := slope(a, b, func(s sizeResult) []time.Duration { return s.floor })
		rows = append(rows, row{fmt.Sprintf("P1 growth %s→%s slots: k in t ∝ N^k", count(a.n), count(b.n)),
			fmt.Sprintf("k = %.2f", svc), fmt.Sprintf("k = %.2f", flr), "—",
			fmt.Sprintf("k ≤ %.1f (linear)", targetGrowth), verdict(svc <= targetGrowth)})
	}
	return rows
}

func statusRows(s statusResult) []row {
	p50 := float64(s.large.quantile(0.5)) / float64(s.small.quantile(0.5))
	tput := s.large.perSecond() / s.floor.perSecond()
	vsHTTP := s.large.perSecond() / s.healthz.perSecond()
	lat := func(r loadResult) string {
		return fmt.Sprintf("p50 %s, p99 %s", dur(r.quantile(0.5)), dur(r.quantile(0.99)))
	}
	return []row{
		{fmt.Sprintf("P2 GET backfill p50, %s-run vs %d-run", count(s.largeRuns), s.smallRuns),
			lat(s.large), lat(s.small), ratioStr(p50), fmt.Sprintf("≤ %.1f", targetStatusP50), verdict(p50 <= targetStatusP50)},
		{fmt.Sprintf("P2 GET backfill throughput, %s-run, vs PK SELECT (32 clients)", count(s.largeRuns)),
			rate(s.large.perSecond(), "req/s"), rate(s.floor.perSecond(), "q/s") + " (" + lat(s.floor) + ")",
			ratioStr(tput), "—", "—"},
		{fmt.Sprintf("P2 GET backfill throughput, %s-run, vs GET /healthz (32 clients)", count(s.largeRuns)),
			rate(s.large.perSecond(), "req/s"), rate(s.healthz.perSecond(), "req/s") + " (" + lat(s.healthz) + ")",
			ratioStr(vsHTTP), "—", "—"},
	}
}

// cpuCell shows a side's median CPU per request: its own process + its database's backends.
func cpuCell(c cpuComparison, side []cpuSample) string {
	own := c.median(side, cpuSample.serverPer)
	pg := c.median(side, cpuSample.pgPer)
	return fmt.Sprintf("%s + PG %s", dur(own), dur(pg))
}

// spread shows the per-round ratios a median was taken of.
func spread(xs []float64) string {
	return fmt.Sprintf("%.2f (rounds %.2f–%.2f)", median(xs), slices.Min(xs), slices.Max(xs))
}

func statusCPURows(s statusCPUResult) []row {
	total, own := median(s.totalRatios()), median(s.serverRatios())
	name := fmt.Sprintf("P2 CPU per GET backfill vs the floor handler (%d rounds of %s, %d clients)", len(s.service), count(s.requests), s.clients)
	return []row{
		{name + ": service + PostgreSQL", cpuCell(s.cpuComparison, s.service), cpuCell(s.cpuComparison, s.floor),
			spread(s.totalRatios()), fmt.Sprintf("≤ %.1f", targetStatusCPUTotal), verdict(total <= targetStatusCPUTotal)},
		{name + ": the service's own share", dur(s.median(s.service, cpuSample.serverPer)), dur(s.median(s.floor, cpuSample.serverPer)),
			spread(s.serverRatios()), fmt.Sprintf("≤ %.1f", targetStatusCPUServer), verdict(own <= targetStatusCPUServer)},
		{name + ": PostgreSQL's share", dur(s.median(s.service, cpuSample.pgPer)), dur(s.median(s.floor, cpuSample.pgPer)),
			spread(s.pgRatios()), "—", "—"},
	}
}

func claimCPURows(c claimCPUResult) []row {
	if len(c.service) == 0 {
		return nil
	}
	ratio := median(c.floorPerService())
	return []row{{fmt.Sprintf("P4 CPU per claim + report cycle, floor handlers / service (%d rounds of %s, %d workers)", len(c.service), count(c.cycles), c.clients),
		cpuCell(c.cpuComparison, c.service), cpuCell(c.cpuComparison, c.floor),
		spread(c.floorPerService()), fmt.Sprintf("≥ %.1f", targetClaimCPU), verdict(ratio >= targetClaimCPU)}}
}

func sweepRows(s sweepResult) []row {
	ratio := float64(median(s.large)) / float64(median(s.small))
	return []row{{
		fmt.Sprintf("P3 sweep pass, %s active backfills, %s vs %s finished runs (median of %d)",
			count(s.active), count(s.largeHistory), count(s.smallHistory), len(s.large)),
		dur(median(s.large)), dur(median(s.small)), ratioStr(ratio),
		fmt.Sprintf("≤ %.1f", targetSweep), verdict(ratio <= targetSweep)}}
}

func claimRows(c claimResult) []row {
	var rows []row
	for i, workers := range c.workers {
		ratio := c.service[i].perSecond() / c.floor[i].perSecond()
		rows = append(rows, row{fmt.Sprintf("P4 claim + report cycles, %d worker%s, vs SKIP LOCKED floor (throughput)", workers, plural(workers)),
			rate(c.service[i].perSecond(), "/s"), rate(c.floor[i].perSecond(), "/s"), ratioStr(ratio), "—", "—"})
	}
	return append(claimCPURows(c.cpu), rows...)
}

// Targets of P7 ("Overload, done right"): under 2×C offered, every answer is 200 or 503 busy
// with Retry-After, a 503 comes within the admission wait (p99), and the goodput per server
// CPU-second stays at least 0.8 of its value at capacity. The latency bounds of admitted
// requests (admittedBound, recoveryBound) are shown as information.
const (
	targetGoodputPerCPU = 0.8
	targetBusyP99       = 100 * time.Millisecond // ADMISSION_WAIT's default
)

func overloadRows(o overloadResult) []row {
	over, base, after := o.over, o.base, o.after
	bad := over.bad + base.bad + after.bad
	answers := fmt.Sprintf("%d ok, %d busy, %d other", over.ok+base.ok+after.ok, over.busy+base.busy+after.busy, bad)
	for _, p := range []phaseResult{base, over, after} {
		if p.firstBad != "" {
			answers += "; first other: " + p.firstBad
			break
		}
	}
	goodput := over.goodput() / o.capacity
	perCPU := over.goodputPerCPU() / max(o.closed.goodputPerCPU(), 1e-9)
	shed := float64(over.busy) / float64(max(over.total(), 1))
	admitted, recovered := admittedBound(base.p99()), recoveryBound(base.p99())
	recoveredIn := "never within the phase"
	if o.recoveredIn >= 0 {
		recoveredIn = "p99 under the bound within " + dur(o.recoveredIn)
	}
	busyP99 := "none shed"
	if over.busy > 0 {
		busyP99 = dur(over.busyP99())
	}
	svcBusyP99 := "not measured"
	switch {
	case over.svcBusy > 0 && over.svcBusyP99 == time.Duration(math.MaxInt64):
		svcBusyP99 = fmt.Sprintf("over 1 s (%d shed)", over.svcBusy)
	case over.svcBusy > 0:
		svcBusyP99 = fmt.Sprintf("≤ %s (%d shed)", dur(over.svcBusyP99), over.svcBusy)
	case over.busy == 0:
		svcBusyP99 = "none shed"
	}
	offered := fmt.Sprintf("%.0f req/s, open loop, %s", over.offered, dur(over.duration))
	return []row{
		{fmt.Sprintf("P7 goodput per server CPU-second (service + PostgreSQL) at 2×C offered (%s), vs at C", offered),
			fmt.Sprintf("%.0f /CPU-s (%.0f req/s, %.0f%% shed)", over.goodputPerCPU(), over.goodput(), 100*shed),
			fmt.Sprintf("%.0f /CPU-s (C = %.0f req/s, 32 clients, closed loop)", o.closed.goodputPerCPU(), o.capacity),
			ratioStr(perCPU), fmt.Sprintf("≥ %.1f", targetGoodputPerCPU), verdict(perCPU >= targetGoodputPerCPU)},
		{"P7 every answer 200, or 503 busy with Retry-After (all phases)", answers, "—", "—", "0 other", verdict(bad == 0)},
		{"P7 p99 from arrival to 503 busy at 2×C, as the load generator saw it (from its send)", busyP99, "—", "—", "≤ " + dur(targetBusyP99) + " (ADMISSION_WAIT)",
			verdict(over.busy == 0 || over.busyP99() <= targetBusyP99)},
		{"P7 p99 from arrival to 503 busy at 2×C, in the service (from its read of the request; " + shedWaitMetric + ")",
			svcBusyP99, "—", "—", "≤ " + dur(targetBusyP99) + " (ADMISSION_WAIT)",
			verdict(over.svcBusy > 0 && over.svcBusyP99 <= targetBusyP99 || over.busy == 0)},
		{"P7 goodput at 2×C offered, vs C (information)", fmt.Sprintf("%.0f req/s", over.goodput()),
			fmt.Sprintf("C = %.0f req/s", o.capacity), ratioStr(goodput), "—", "—"},
		{"P7 p99 of admitted GETs at 2×C, vs p99 at C/2 before (information)", dur(over.p99()), dur(base.p99()),
			ratioStr(float64(over.p99()) / float64(max(base.p99(), 1))),
			"— (was ≤ " + dur(admitted) + ")", "—"},
		{fmt.Sprintf("P7 p99 at C/2 right after the overload (%s; %s), vs before (information)", dur(after.duration), recoveredIn),
			dur(after.p99()), dur(base.p99()), ratioStr(float64(after.p99()) / float64(max(base.p99(), 1))),
			"— (was ≤ " + dur(recovered) + ")", "—"},
	}
}

func memoryRows(c createResult, m memResult) row {
	name := fmt.Sprintf("P5 service RSS while creating %s-slot backfills, above rest", count(c.largest().n))
	if m.err != nil {
		return row{name, "not measured: " + m.err.Error(), "—", "—", fmt.Sprintf("≤ %d MiB", targetMemoryMiB), "—"}
	}
	above := float64(max(m.peak-m.rest, 0)) / (1 << 20)
	return row{name, fmt.Sprintf("+%.0f MiB (peak %.0f MiB)", above, float64(m.peak)/(1<<20)),
		fmt.Sprintf("rest %.0f MiB", float64(m.rest)/(1<<20)), "—",
		fmt.Sprintf("≤ %d MiB", targetMemoryMiB), verdict(above <= targetMemoryMiB)}
}

// writeTable writes a Markdown table with padded columns.
func writeTable(w io.Writer, header []string, rows []row) {
	cells := [][]string{header}
	for _, r := range rows {
		cells = append(cells, []string{r.scenario, r.service, r.floor, r.ratio, r.target, r.result})
	}
	widths := make([]int, len(header))
	for _, line := range cells {
		for i, c := range line {
			widths[i] = max(widths[i], len([]rune(c)))
		}
	}
	for n, line := range cells {
		var b strings.Builder
		for i, c := range line {
			fmt.Fprintf(&b, "| %s%s ", c, strings.Repeat(" ", widths[i]-len([]rune(c))))
		}
		fmt.Fprintln(w, b.String()+"|")
		if n == 0 {
			b.Reset()
			for _, wd := range widths {
				b.WriteString("|" + strings.Repeat("-", wd+2))
			}
			fmt.Fprintln(w, b.String()+"|")
		}
	}
}

// dur prints a duration with three significant digits in a fitting unit.
func dur(d time.Duration) string {
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.2f s", d.Seconds())
	case d >= time.Millisecond:
		return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond))
	}
}

func rate(v float64, unit string) string { return fmt.Sprintf("%.0f %s", v, unit) }

func perSlot(d time.Duration, n int) float64 {
	return float64(d) / float64(time.Microsecond) / float64(n)
}

// count prints 1000 as 1k and 1000000 as 1M.
func count(n int) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return fmt.Sprintf("%dM", n/1_000_000)
	case n >= 1_000 && n%1_000 == 0:
		return fmt.Sprintf("%dk", n/1_000)
	default:
		return fmt.Sprint(n)
	}
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// ratioStr prints a ratio with three significant digits, so that one just under a target
// (0.396 against 0.4) does not print as the target itself.
func ratioStr(r float64) string {
	if r < 1 {
		return fmt.Sprintf("%.3f", r)
	}
	return fmt.Sprintf("%.2f", r)
}
