package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// The floor handlers: the smallest idiomatic Go HTTP handlers for the service's hot requests,
// net/http, database/sql, lib/pq, one prepared statement each, encoding/json. They run in a
// process of their own (this command, started again as `bench floor-server`), so that their CPU
// is read from /proc like the service's and not mixed with the load generator's.
//
//	GET  /api/v1/backfills/{id}  one primary-key SELECT of the columns the service's answer shows
//	POST /claim  {"worker_id", "backfill_id"}  the minimal SKIP LOCKED claim of one queued run
//	POST /report {"id", "worker_id"}           the guarded update of that run to success

// statusColumns are the backfill columns that GET /backfills/{id} of the service shows.
const statusColumns = `id, dag_id, from_date, to_date, run_backwards, dag_run_conf, reprocess_behavior,
	max_active_runs, description, state, created_at, updated_at, completed_at,
	num_queued, num_running, num_success, num_failed, num_canceled, num_skipped,
	max_failed_runs, pause_reason, plan_hash, parent_backfill_id`

// serveFloor is `bench floor-server -addr A -status-db DSN -claim-db DSN`.
func serveFloor(args []string) error {
	fs := flag.NewFlagSet("floor-server", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:0", "listen address")
	statusDSN := fs.String("status-db", "", "database of the backfills read by GET")
	claimDSN := fs.String("claim-db", "", "database of the runs claimed and reported")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx := context.Background()
	statusDB, err := openDB(*statusDSN, 20)
	if err != nil {
		return err
	}
	claimDB, err := openDB(*claimDSN, 20)
	if err != nil {
		return err
	}
	get, err := statusDB.PrepareContext(ctx, `SELECT `+statusColumns+` FROM backfills WHERE id = $1`)
	if err != nil {
		return err
	}
	claim, err := claimDB.PrepareContext(ctx, floorClaimSQL)
	if err != nil {
		return err
	}
	report, err := claimDB.PrepareContext(ctx, floorReportSQL)
	if err != nil {
		return err
	}
	names := strings.Split(statusColumns, ",")
	for i := range names {
		names[i] = strings.TrimSpace(names[i])
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/backfills/{id}", func(w http.ResponseWriter, r *http.Request) {
		id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
		if err != nil {
			http.Error(w, "bad id", http.StatusBadRequest)
			return
		}
		vals := make([]any, len(names))
		ptrs := make([]any, len(names))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := get.QueryRowContext(r.Context(), id).Scan(ptrs...); err != nil {
			http.Error(w, err.Error(), http.StatusNotFound)
			return
		}
		out := make(map[string]any, len(names))
		for i, n := range names {
			if b, ok := vals[i].([]byte); ok {
				vals[i] = string(b)
			}
			out[n] = vals[i]
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(out)
	})
	mux.HandleFunc("POST /claim", func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			WorkerID   string `json:"worker_id"`
			BackfillID int64  `json:"backfill_id"`
		}
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var id int64
		if err := claim.QueryRowContext(r.Context(), in.WorkerID, in.BackfillID).Scan(&id); err != nil {
			http.Error(w, err.Error(), http.StatusConflict)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]int64{"id": id})
	})
	mux.HandleFunc("POST /report", func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			ID       int64  `json:"id"`
			WorkerID string `json:"worker_id"`
		}
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		res, err := report.ExecContext(r.Context(), in.ID, in.WorkerID)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		if n, _ := res.RowsAffected(); n != 1 {
			http.Error(w, "not running under this worker", http.StatusConflict)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]bool{"ok": true})
	})
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	// The parent reads the address from the first line.
	fmt.Println(ln.Addr().String())
	return http.Serve(ln, mux)
}

// floorServer is the floor handlers' process.
type floorServer struct {
	base string
	cmd  *exec.Cmd
}

// startFloorServer starts this executable again as the floor handlers.
func startFloorServer(ctx context.Context, statusDSN, claimDSN string) (*floorServer, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, "floor-server", "-status-db", statusDSN, "-claim-db", claimDSN)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.SysProcAttr = childProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	f := &floorServer{cmd: cmd}
	line := make(chan string, 1)
	go func() {
		var b [128]byte
		n, _ := out.Read(b[:])
		line <- strings.TrimSpace(string(b[:n]))
	}()
	select {
	case addr := <-line:
		if addr == "" {
			return nil, errors.Join(errors.New("floor server did not start"), f.stop())
		}
		f.base = "http://" + addr
	case <-time.After(30 * time.Second):
		return nil, errors.Join(errors.New("floor server did not start within 30 s"), f.stop())
	case <-ctx.Done():
		return nil, errors.Join(ctx.Err(), f.stop())
	}
	return f, nil
}

func (f *floorServer) pid() int { return f.cmd.Process.Pid }

func (f *floorServer) stop() error {
	_ = f.cmd.Process.Kill()
	_ = f.cmd.Wait()
	return nil
}
