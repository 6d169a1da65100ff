package main

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
)

// claimCPUResult is P4's target: what one claim + report cycle costs the service and
// PostgreSQL in CPU, against the floor handlers' minimal SKIP LOCKED claim and guarded update.
type claimCPUResult struct {
	cpuComparison
	cycles, clients int
}

// targetClaimCPU: the floor's CPU per cycle is at least half the service's (the service costs
// at most twice the floor), the median of the per-round ratios.
const targetClaimCPU = 0.5

// floorPerService is the P4 figure per round: the floor's total CPU per cycle over the
// service's, so that higher is better like the throughput ratio it replaces.
func (c claimCPUResult) floorPerService() []float64 {
	out := c.totalRatios()
	for i, r := range out {
		out[i] = 1 / r
	}
	return out
}

// scenarioClaimCPU runs rounds of cycles (claim one run, report it successful) from a few
// workers, over HTTP to the service on one backfill of its database and to the floor handlers
// on one backfill of the floor's, reading each server's CPU and its database's backends'.
func (b *bench) scenarioClaimCPU(ctx context.Context, fl *floorServer, svcDB, floorDB string, floorBackfill int64) (claimCPUResult, error) {
	res := claimCPUResult{cycles: b.cfg.cpuCycles, clients: 4}
	floorCycle := func(ctx context.Context, worker int) error {
		w := "fw" + strconv.Itoa(worker)
		var claimed struct {
			ID int64 `json:"id"`
		}
		err := call(ctx, b.client, http.MethodPost, fl.base+"/claim",
			map[string]any{"worker_id": w, "backfill_id": floorBackfill}, http.StatusOK, &claimed)
		if err != nil {
			return fmt.Errorf("floor claim: %w", err)
		}
		return call(ctx, b.client, http.MethodPost, fl.base+"/report",
			map[string]any{"id": claimed.ID, "worker_id": w}, http.StatusOK, nil)
	}
	service := func() (cpuSample, error) {
		return measureCPU(ctx, b.svc.cmd.Process.Pid, svcDB, res.cycles, res.clients, func(ctx context.Context, worker int) error {
			return b.claimCycle(ctx, "cw"+strconv.Itoa(worker))
		})
	}
	floor := func() (cpuSample, error) {
		return measureCPU(ctx, fl.pid(), floorDB, res.cycles, res.clients, floorCycle)
	}
	var err error
	res.cpuComparison, err = b.compareCPU("P4", "cycle", service, floor, func(c cpuComparison, i int) string {
		return fmt.Sprintf("floor/service %.2f", claimCPUResult{cpuComparison: c}.floorPerService()[i])
	})
	return res, err
}
