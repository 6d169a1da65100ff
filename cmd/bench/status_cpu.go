package main

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
)

// statusCPUResult is P2's target: what one GET /backfills/{id} costs the service and
// PostgreSQL in CPU, against the floor handler answering the same row.
type statusCPUResult struct {
	cpuComparison
	requests, clients int
}

// Targets of "A request costs little" (CONTRACT.md): medians of the per-round ratios.
const (
	targetStatusCPUTotal  = 1.2 // service + PostgreSQL ≤ 1.2 × the floor handler's
	targetStatusCPUServer = 1.3 // the service process alone ≤ 1.3 × the floor handler process
)

// scenarioStatusCPU is P2's CPU measure: rounds of n keep-alive GETs of one backfill from a
// few closed-loop clients, to the service and to the floor handler (floor_server.go) in turn,
// reading each server's CPU and that of the PostgreSQL backends of the service's database,
// which both read. The service's background loops are quiet: the sweep runs once an hour
// (startService), and no webhook or event stream exists.
func (b *bench) scenarioStatusCPU(ctx context.Context, fl *floorServer, svcDB string, id int64) (statusCPUResult, error) {
	res := statusCPUResult{requests: b.cfg.cpuRequests, clients: cpuClients}
	path := "/api/v1/backfills/" + strconv.FormatInt(id, 10)
	get := func(base string) func(ctx context.Context, _ int) error {
		u := base + path
		return func(ctx context.Context, _ int) error {
			return call(ctx, b.client, http.MethodGet, u, nil, http.StatusOK, nil)
		}
	}
	service := func() (cpuSample, error) {
		return measureCPU(ctx, b.svc.cmd.Process.Pid, svcDB, res.requests, res.clients, get(b.svc.base))
	}
	floor := func() (cpuSample, error) {
		return measureCPU(ctx, fl.pid(), svcDB, res.requests, res.clients, get(fl.base))
	}
	var err error
	res.cpuComparison, err = b.compareCPU("P2", "GET", service, floor, func(c cpuComparison, i int) string {
		return fmt.Sprintf("total %.2f×, own %.2f×", c.totalRatios()[i], c.serverRatios()[i])
	})
	return res, err
}

// cpuRounds is how many alternating rounds a CPU comparison takes (the contract's five), and
// cpuClients the closed-loop clients of each round: enough to keep both cores busy, few enough
// that neither server queues.
const (
	cpuRounds  = 5
	cpuClients = 8
)
