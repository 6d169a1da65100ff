package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// healthcheck asks this container's own server whether it is ready (GET /readyz on
// HTTP_ADDR's port over loopback) and fails unless it answers 200. It exists for the
// Docker healthcheck: the distroless image has no shell, curl or wget to probe with, so the
// binary probes itself. It opens no database connection of its own.
func healthcheck(ctx context.Context, getenv func(string) string, stdout io.Writer) error {
	addr := getenv("HTTP_ADDR")
	if addr == "" {
		addr = defaultHTTPAddr
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("healthcheck: HTTP_ADDR %q: %w", addr, err)
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	url := "http://" + net.JoinHostPort("127.0.0.1", port) + "/readyz"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(res.Body, 4096))
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("healthcheck: %s answered %d: %s", url, res.StatusCode, body)
	}
	fmt.Fprintf(stdout, "ready: %s\n", body)
	return nil
}
