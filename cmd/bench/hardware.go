package main

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// hardware is what the numbers were measured on.
type hardware struct {
	CPU        string
	Cores      int
	MemBytes   int64
	PostgreSQL string
	PGSettings string
	Go         string
	OS         string
	Date       time.Time
	Elapsed    time.Duration
}

func collectHardware(ctx context.Context, admin *sql.DB) (*hardware, error) {
	hw := &hardware{
		CPU:   "unknown",
		Cores: runtime.NumCPU(),
		Go:    runtime.Version(),
		OS:    runtime.GOOS + "/" + runtime.GOARCH,
		Date:  time.Now().UTC(),
	}
	if v := procField("/proc/cpuinfo", "model name"); v != "" {
		hw.CPU = v
	}
	if v := procField("/proc/meminfo", "MemTotal"); v != "" {
		kb, _ := strconv.ParseInt(strings.TrimSuffix(v, " kB"), 10, 64)
		hw.MemBytes = kb << 10
	}
	if err := admin.QueryRowContext(ctx, `SHOW server_version`).Scan(&hw.PostgreSQL); err != nil {
		return nil, fmt.Errorf("server version: %w", err)
	}
	// The settings that move these numbers most: every commit waits for its WAL flush
	// unless fsync or synchronous_commit is off.
	var settings []string
	for _, name := range []string{"fsync", "synchronous_commit", "shared_buffers", "max_connections"} {
		var v string
		if err := admin.QueryRowContext(ctx, `SELECT current_setting($1)`, name).Scan(&v); err != nil {
			return nil, fmt.Errorf("setting %s: %w", name, err)
		}
		settings = append(settings, name+"="+v)
	}
	hw.PGSettings = strings.Join(settings, ", ")
	return hw, nil
}

// procField returns the value of the first "key : value" line of a /proc file, or "".
func procField(path, key string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
