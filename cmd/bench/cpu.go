package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// CPU per request, read from /proc. On a machine whose cores the load generator, the server and
// PostgreSQL share (and, on a shared machine, other people's work), a throughput ratio mostly
// measures whoever else is running; the CPU time that the server process and the PostgreSQL
// backends of its database spent while a fixed number of requests were answered is what one
// request costs, whatever else runs.
//
// Only the backends connected to the database under test are counted: PostgreSQL's shared
// processes (WAL writer, checkpointer, autovacuum) and other databases' backends serve
// everyone on the server. The WAL writer's share of a write is therefore left out on both
// sides alike.

// clockTick is the unit of utime and stime in /proc/<pid>/stat (USER_HZ, 100 on Linux).
const clockTick = 10 * time.Millisecond

// procCPU is the user plus system CPU time of one process.
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces; the fields after its ")" do not.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("unexpected /proc/<pid>/stat")
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, errors.New("unexpected /proc/<pid>/stat")
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return time.Duration(utime+stime) * clockTick, nil
}

// backendsCPU maps the pid of every PostgreSQL backend connected to database dbname to its CPU
// time so far. A backend's process title is "postgres: [cluster: ]user dbname host(port) ...".
func backendsCPU(dbname string) map[int]time.Duration {
	out := map[int]time.Duration{}
	paths, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	needle := " " + dbname + " "
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil || !bytes.HasPrefix(b, []byte("postgres: ")) || !bytes.Contains(b, []byte(needle)) {
			continue
		}
		pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		if err != nil {
			continue
		}
		if t, err := procCPU(pid); err == nil {
			out[pid] = t
		}
	}
	return out
}

// dbNameOf is the database a lib/pq URL names.
func dbNameOf(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return ""
	}
	return strings.TrimPrefix(u.Path, "/")
}

// cpuSample is what one round of requests cost.
type cpuSample struct {
	n              int           // requests (or cycles) answered
	server, pg     time.Duration // CPU time of the server process and of the database's backends
	elapsed        time.Duration
	serverPID      int
	firstErr       error
	backendsStarts int // backends that appeared during the round (counted from zero)
}

func (s cpuSample) serverPer() time.Duration { return s.server / time.Duration(max(s.n, 1)) }
func (s cpuSample) pgPer() time.Duration     { return s.pg / time.Duration(max(s.n, 1)) }
func (s cpuSample) totalPer() time.Duration  { return s.serverPer() + s.pgPer() }
func (s cpuSample) perSecond() float64       { return float64(s.n) / s.elapsed.Seconds() }

// measureCPU runs op n times from clients concurrent closed-loop clients and reads the CPU
// that server pid and the backends of dbname spent meanwhile.
func measureCPU(ctx context.Context, pid int, dbname string, n, clients int, op func(ctx context.Context, client int) error) (cpuSample, error) {
	s := cpuSample{n: n, serverPID: pid}
	s0, err := procCPU(pid)
	if err != nil {
		return s, fmt.Errorf("server cpu: %w", err)
	}
	pg0 := backendsCPU(dbname)
	start := time.Now()
	var (
		left  atomic.Int64
		wg    sync.WaitGroup
		errMu sync.Mutex
	)
	left.Store(int64(n))
	for c := range clients {
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				if err := op(ctx, c); err != nil {
					errMu.Lock()
					if s.firstErr == nil {
						s.firstErr = err
					}
					errMu.Unlock()
					left.Store(0)
					return
				}
			}
		})
	}
	wg.Wait()
	s.elapsed = time.Since(start)
	s1, err := procCPU(pid)
	if err != nil {
		return s, fmt.Errorf("server cpu: %w", err)
	}
	s.server = s1 - s0
	for p, t := range backendsCPU(dbname) {
		before, ok := pg0[p]
		if !ok {
			s.backendsStarts++
		}
		s.pg += t - before
	}
	if s.firstErr != nil {
		return s, s.firstErr
	}
	return s, ctx.Err()
}

// cpuComparison is rounds of the service and a floor handler measured alternately.
type cpuComparison struct {
	service, floor []cpuSample
}

// ratios are the per-round ratios of the service's CPU per request to the floor's: its own
// share (server process alone) and the total (server and PostgreSQL).
func (c cpuComparison) serverRatios() []float64 {
	return c.ratios(func(s cpuSample) time.Duration { return s.serverPer() })
}

func (c cpuComparison) totalRatios() []float64 {
	return c.ratios(func(s cpuSample) time.Duration { return s.totalPer() })
}

func (c cpuComparison) pgRatios() []float64 {
	return c.ratios(func(s cpuSample) time.Duration { return s.pgPer() })
}

func (c cpuComparison) ratios(f func(cpuSample) time.Duration) []float64 {
	out := make([]float64, len(c.service))
	for i := range c.service {
		out[i] = float64(f(c.service[i])) / float64(max(f(c.floor[i]), 1))
	}
	return out
}

// median returns the median of figures (0 for none).
func median[T int64 | float64 | time.Duration](xs []T) T {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func (c cpuComparison) median(side []cpuSample, f func(cpuSample) time.Duration) time.Duration {
	xs := make([]time.Duration, len(side))
	for i, s := range side {
		xs[i] = f(s)
	}
	return median(xs)
}

// compareCPU is a CPU comparison of the service with the floor: both warmed first (pools
// full, statements prepared, plans cached, heaps grown), then cpuRounds alternating rounds,
// each logged as "<label> CPU round i: ... per <unit> ...: <tail>".
func (b *bench) compareCPU(label, unit string, service, floor func() (cpuSample, error), tail func(c cpuComparison, round int) string) (cpuComparison, error) {
	for _, side := range []func() (cpuSample, error){service, floor} {
		if _, err := side(); err != nil {
			return cpuComparison{}, fmt.Errorf("warm-up: %w", err)
		}
	}
	c, err := alternate(cpuRounds, service, floor)
	if err != nil {
		return c, err
	}
	for i := range c.service {
		s, f := c.service[i], c.floor[i]
		b.log.Printf("%s CPU round %d: service %v + PostgreSQL %v per %s (%.0f/s), floor %v + %v (%.0f/s): %s",
			label, i+1, s.serverPer().Round(time.Microsecond), s.pgPer().Round(time.Microsecond), unit, s.perSecond(),
			f.serverPer().Round(time.Microsecond), f.pgPer().Round(time.Microsecond), f.perSecond(), tail(c, i))
	}
	return c, nil
}

// alternate measures the service and the floor for rounds rounds, the side that opens
// alternating, so that drift on a shared machine falls on both alike.
func alternate(rounds int, service, floor func() (cpuSample, error)) (cpuComparison, error) {
	var c cpuComparison
	for i := range rounds {
		sides := []func() (cpuSample, error){service, floor}
		if i%2 == 1 {
			sides[0], sides[1] = floor, service
		}
		var got [2]cpuSample
		for j, side := range sides {
			s, err := side()
			if err != nil {
				return c, err
			}
			got[j] = s
		}
		if i%2 == 1 {
			got[0], got[1] = got[1], got[0]
		}
		c.service = append(c.service, got[0])
		c.floor = append(c.floor, got[1])
	}
	return c, nil
}
