package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestMain lets the test binary serve as the floor handlers' process: the command starts its
// own executable again as `floor-server`, which under go test is this binary.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "floor-server" {
		if err := serveFloor(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "floor-server:", err)
			os.Exit(1)
		}
		return
	}
	os.Exit(m.Run())
}

// TestSmokeRunsEveryScenario runs the whole command in smoke mode, so that the benchmarks
// cannot rot: it builds and starts the real service, creates and drops its scratch databases,
// and must print a row for every scenario and write the chart. It asserts nothing about the
// figures: a test is no place for timings, and smoke sizes measure nothing.
//
// It finds PostgreSQL as the project's tests do: TEST_DATABASE_URL, else 127.0.0.1:5432.
func TestSmokeRunsEveryScenario(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the service; skipped with -short")
	}
	server := os.Getenv("TEST_DATABASE_URL")
	if server == "" {
		server = defaultServerURL
	}
	chart := filepath.Join(t.TempDir(), "creation.svg")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	var stdout, stderr bytes.Buffer
	err := run(ctx, []string{"-smoke", "-db", server, "-chart", chart}, func(string) string { return "" }, &stdout, &stderr)
	if err != nil {
		t.Fatalf("bench -smoke: %v\nprogress:\n%s", err, stderr.String())
	}
	out := stdout.String()
	for _, want := range []string{"P1 POST backfill", "row-by-row", "P1 growth", "P2 GET backfill p50",
		"P2 GET backfill throughput", "P3 sweep pass", "P4 claim + report cycles, 4 workers", "P5 service RSS",
		"P2 CPU per GET backfill", "P4 CPU per claim + report cycle", "P6 cancel, 1k runs", "P6 reprocess failed growth",
		"P2 GET backfill throughput, 1k-run, vs GET /healthz", "P7 goodput per server CPU-second", "P7 every answer", "P7 p99 from arrival to 503", "P7 p99 of admitted",
		"P7 p99 at C/2 right after",
		"PostgreSQL", "cores"} {
		if !strings.Contains(out, want) {
			t.Errorf("the report has no %q:\n%s", want, out)
		}
	}
	svg, err := os.ReadFile(chart)
	if err != nil {
		t.Fatalf("chart: %v", err)
	}
	if !bytes.HasPrefix(svg, []byte("<svg")) || !bytes.Contains(svg, []byte("COPY floor")) {
		t.Errorf("the chart is not the expected SVG:\n%s", svg)
	}
	if !strings.Contains(stderr.String(), "dropped") {
		t.Errorf("no scratch database was dropped:\n%s", stderr.String())
	}
	t.Log(out)
}
