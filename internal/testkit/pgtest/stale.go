package pgtest

// The stale sweep: databases that crashed or interrupted runs left behind.

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/lib/pq"
)

// sweepStale drops harness databases (named with prefix) that earlier runs left behind when they crashed, timed
// out or were interrupted before their cleanups ran. A database goes only if nobody is
// connected to it and either its creating process on this host is gone or it is older than
// staleAfter; plain DROP DATABASE (no FORCE) refuses anything that is still in use, so a
// parallel run is never harmed. Failures are ignored: the sweep is housekeeping.
func sweepStale(ctx context.Context, admin *sql.DB, prefix, host string) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	rows, err := admin.QueryContext(ctx, `
		SELECT d.datname, coalesce(shobj_description(d.oid, 'pg_database'), '')
		FROM pg_database d
		WHERE starts_with(d.datname, $1)
		  AND NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.datid = d.oid)`, prefix)
	if err != nil {
		return
	}
	var stale []string
	for rows.Next() {
		var name, comment string
		if rows.Scan(&name, &comment) != nil {
			continue
		}
		if isStale(comment, host, time.Now()) {
			stale = append(stale, name)
		}
	}
	_ = rows.Close()
	for _, name := range stale {
		_, _ = admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+pq.QuoteIdentifier(name))
	}
}

// isStale decides from a database's label whether its run is over. Unlabelled databases are
// kept: one may belong to a run that has not labelled it yet.
func isStale(comment, host string, now time.Time) bool {
	var h string
	var pid int
	var created time.Time
	for _, f := range strings.Fields(comment) {
		k, v, _ := strings.Cut(f, "=")
		switch k {
		case "host":
			h = v
		case "pid":
			pid, _ = strconv.Atoi(v)
		case "created":
			created, _ = time.Parse(time.RFC3339, v)
		}
	}
	if created.IsZero() {
		return false
	}
	if now.Sub(created) > staleAfter {
		return true
	}
	return h != "" && h == strings.ReplaceAll(host, " ", "_") && pid > 0 && !processAlive(pid)
}

// processAlive reports whether pid names a live process on this host. Anything short of a
// definite "no such process" counts as alive, so a doubt never drops a database.
func processAlive(pid int) bool {
	p, err := os.FindProcess(pid)
	if err != nil {
		return true
	}
	err = p.Signal(syscall.Signal(0))
	return !errors.Is(err, os.ErrProcessDone)
}
