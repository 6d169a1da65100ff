package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// overloadResult is P7.
type overloadResult struct {
	capacity float64 // C: closed-loop GET throughput with 32 workers, req/s
	// closed is the closed loop that measured C; base runs at C/2 before the overload, over
	// at 2×C, after at C/2 right after it.
	closed, base, over, after phaseResult
	// recoveredIn is when, after the overload ended, the first half-second window at C/2 had
	// its p99 back under the recovery bound; -1 if none did.
	recoveredIn time.Duration
}

// phaseResult is one open-loop phase: what was offered and what came back.
type phaseResult struct {
	offered  float64 // req/s
	duration time.Duration
	ok, busy int
	// bad counts every other answer: another status, a 503 that is not busy or has no
	// Retry-After, a timeout or a connection error. firstBad describes the first.
	bad      int
	firstBad string
	okLat    []time.Duration // latencies of the 200s, sorted
	busyLat  []time.Duration // latencies of the 503 busy answers, sorted
	// windows holds the 200s' latencies by half-second of the phase, for recovery.
	windows [][]time.Duration
	// svcCPU and genCPU are the CPU time the service and this load generator used per
	// answer (served or shed) during the phase; 0 when not measured.
	svcCPU, genCPU time.Duration
	// svcBusyP99 is the p99 of shed requests' waits inside the service (from being read to
	// the 503; the bucket bound of its histogram) and svcBusy how many it counted; zero
	// when not measured.
	svcBusyP99 time.Duration
	svcBusy    uint64
	// serverCPU is all the CPU the service process and the PostgreSQL backends of its
	// database spent in the phase; 0 when not measured.
	serverCPU time.Duration
}

// goodputPerCPU is the 200s answered per second of server CPU (service and PostgreSQL).
func (p phaseResult) goodputPerCPU() float64 {
	if p.serverCPU <= 0 {
		return 0
	}
	return float64(p.ok) / p.serverCPU.Seconds()
}

// busyP99 is the p99 of the time a shed request waited for its 503.
func (p phaseResult) busyP99() time.Duration { return loadResult{lat: p.busyLat}.quantile(0.99) }

func (p phaseResult) total() int { return p.ok + p.busy + p.bad }

func (p phaseResult) goodput() float64 { return float64(p.ok) / p.duration.Seconds() }

func (p phaseResult) p99() time.Duration { return loadResult{lat: p.okLat}.quantile(0.99) }

// recoveryBound is how far the p99 after the overload may be from the base p99.
func recoveryBound(base time.Duration) time.Duration { return 3*base + 20*time.Millisecond }

// admittedBound is how far the p99 of admitted requests under overload may go.
func admittedBound(base time.Duration) time.Duration { return max(10*base, 250*time.Millisecond) }

// overloadWindow is the resolution of the recovery measurement.
const overloadWindow = 500 * time.Millisecond

// scenarioOverload is P7: the capacity C of GET /backfills/{id} from 32 closed-loop clients;
// then, open loop (requests leave on schedule whether or not earlier ones have come back, as
// real clients' do), C/2 as the base, 2×C as the overload, and C/2 again to see the service
// recover. The service must shed what it cannot serve (503 busy with Retry-After) within its
// admission wait of the request's arrival, and spend its CPU on answers: the 200s per second
// of server CPU (the service and its database's backends) at 2×C stay near their value at C. Every phase, the closed loop included, is driven by vegeta, so that C and
// the goodput under overload are measured with the same client costs on the shared cores.
func (b *bench) scenarioOverload(ctx context.Context) (overloadResult, error) {
	var res overloadResult
	_, id, err := b.serviceCreate(ctx, newWindow("p7", 100), 10)
	if err != nil {
		return res, err
	}
	u := b.url("/backfills/" + strconv.FormatInt(id, 10))
	target := vegeta.Target{Method: http.MethodGet, URL: u}
	capDur, baseDur, overDur, afterDur := b.cfg.loadDuration, 5*time.Second, 10*time.Second, 5*time.Second
	if b.cfg.smoke {
		baseDur, overDur, afterDur = 500*time.Millisecond, time.Second, time.Second
	}
	// Warm-up, then C. If the machine is loaded enough for 32 closed-loop clients to be shed,
	// C is what they got served.
	if _, err := b.attack(ctx, target, 0, overloadWindow); err != nil {
		return res, err
	}
	if res.closed, err = b.attack(ctx, target, 0, capDur); err != nil {
		return res, fmt.Errorf("capacity: %w", err)
	}
	res.capacity = res.closed.goodput()
	b.log.Printf("P7 capacity C %.0f req/s (32 closed-loop clients, p99 %v, %d shed)",
		res.capacity, res.closed.p99().Round(time.Microsecond), res.closed.busy)
	if res.capacity < 1 {
		return res, fmt.Errorf("capacity: nothing served in %v (%d busy, %d other: %s)",
			capDur, res.closed.busy, res.closed.bad, res.closed.firstBad)
	}

	for _, ph := range []struct {
		name string
		dst  *phaseResult
		rate float64
		d    time.Duration
	}{
		{"C/2 before", &res.base, res.capacity / 2, baseDur},
		{"2×C", &res.over, 2 * res.capacity, overDur},
		{"C/2 after", &res.after, res.capacity / 2, afterDur},
	} {
		waits0, waitErr := b.scrapeShedWaits(ctx)
		if *ph.dst, err = b.attack(ctx, target, ph.rate, ph.d); err != nil {
			return res, fmt.Errorf("%s: %w", ph.name, err)
		}
		if waitErr == nil {
			var waits1 shedWaits
			if waits1, waitErr = b.scrapeShedWaits(ctx); waitErr == nil {
				waits := waits1.minus(waits0)
				ph.dst.svcBusyP99, ph.dst.svcBusy = waits.quantile(0.99)
				b.log.Printf("P7 %s: the service's shed waits: %s", ph.name, waits)
			}
		}
		if waitErr != nil {
			b.log.Printf("P7 %s: the service's shed waits not measured: %v", ph.name, waitErr)
		}
		p := *ph.dst
		b.log.Printf("P7 %-10s offered %5.0f/s: %d ok, %d busy (p99 %v), %d other; goodput %.0f/s (%.0f per server CPU-second), admitted p99 %v",
			ph.name, p.offered, p.ok, p.busy, p.busyP99().Round(time.Microsecond), p.bad, p.goodput(), p.goodputPerCPU(),
			p.p99().Round(time.Microsecond))
	}
	res.recoveredIn = -1
	bound := recoveryBound(res.base.p99())
	for i, w := range res.after.windows {
		slices.Sort(w)
		if len(w) > 0 && (loadResult{lat: w}).quantile(0.99) <= bound {
			res.recoveredIn = time.Duration(i+1) * overloadWindow
			break
		}
	}
	return res, nil
}

// attack sends GETs with vegeta for d and sorts every answer: open loop at rate a second, or,
// with rate 0, a closed loop of 32 workers (each sends its next request when its last one is
// answered).
func (b *bench) attack(ctx context.Context, target vegeta.Target, rate float64, d time.Duration) (phaseResult, error) {
	res := phaseResult{offered: rate, duration: d}
	opts := []func(*vegeta.Attacker){
		// A timeout is a failure of the scenario: the service must answer within its
		// admission wait plus its work, not queue.
		vegeta.Timeout(10 * time.Second),
		vegeta.KeepAlive(true),
		vegeta.Redirects(vegeta.NoFollow),
		// Enough to tell a busy problem from another answer; the rest is read and dropped.
		vegeta.MaxBody(512),
		// A bounded set of keep-alive connections, as clients behind their pools have: without
		// it the generator opens a connection per request in flight, and on cores it shares
		// with the service, dialing and accepting them costs more than the requests (measured:
		// 277 µs of generator CPU per answer at 2×C, EOFs from connections the starved
		// service never read). 1,024 leave about 90 ms per request at 11k/s.
		vegeta.MaxConnections(1024),
	}
	pacer := vegeta.Rate{} // zero: as fast as the workers go
	if rate > 0 {
		// Per a whole second, or tiny smoke rates would round to nothing.
		pacer = vegeta.Rate{Freq: max(1, int(rate+0.5)), Per: time.Second}
		opts = append(opts, vegeta.Workers(64))
	} else {
		opts = append(opts, vegeta.Workers(32), vegeta.MaxWorkers(32))
	}
	atk := vegeta.NewAttacker(opts...)
	stop := context.AfterFunc(ctx, func() { atk.Stop() })
	defer stop()
	svc0, svcErr0 := b.svc.cpu()
	gen0 := selfCPU()
	pg0 := backendsCPU(b.svcDBName)
	for r := range atk.Attack(vegeta.NewStaticTargeter(target), pacer, d, "p7") {
		res.sort(r)
	}
	if err := ctx.Err(); err != nil {
		return res, err
	}
	if n := time.Duration(max(res.total(), 1)); svcErr0 == nil {
		if svc1, err := b.svc.cpu(); err == nil {
			res.svcCPU = (svc1 - svc0) / n
			res.serverCPU = svc1 - svc0
			for pid, t := range backendsCPU(b.svcDBName) {
				res.serverCPU += t - pg0[pid] // a backend that started meanwhile counts from 0
			}
		}
		res.genCPU = (selfCPU() - gen0) / n
	}
	slices.Sort(res.okLat)
	slices.Sort(res.busyLat)
	return res, nil
}

// sort files one answer as ok, busy or bad.
func (p *phaseResult) sort(r *vegeta.Result) {
	switch {
	case r.Code == http.StatusOK:
		p.ok++
		p.okLat = append(p.okLat, r.Latency)
		// The request's place in the schedule: the pacer sends number n at n/rate seconds
		// (a closed loop has no schedule, and needs no windows).
		i := int(r.Seq * uint64(time.Second) / uint64(max(1, int(p.offered+0.5))) / uint64(overloadWindow))
		if p.offered == 0 {
			i = 0
		}
		for len(p.windows) <= i {
			p.windows = append(p.windows, nil)
		}
		p.windows[i] = append(p.windows[i], r.Latency)
	case r.Code == http.StatusServiceUnavailable && r.Headers.Get("Retry-After") != "" &&
		bytes.Contains(r.Body, []byte(`"code":"busy"`)):
		p.busy++
		p.busyLat = append(p.busyLat, r.Latency)
	default:
		p.bad++
		if p.firstBad == "" {
			p.firstBad = fmt.Sprintf("status %d, error %q, body %.200s", r.Code, r.Error, r.Body)
		}
	}
}
