//go:build ha

package ha

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The stack deploy/ha/up.sh brought up: its directory, its Patroni nodes and REST ports.
var (
	haDir = envOr("HA_DIR", "/tmp/backfill-ha")
	nodes = []struct {
		name     string
		rest, pg int
	}{{"pg1", 28008, 25432}, {"pg2", 28009, 25433}}
)

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// restOK asks a Patroni node's REST endpoint (/primary, /sync) for a 200.
func restOK(port int, path string) bool {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get(fmt.Sprintf("http://127.0.0.1:%d%s", port, path))
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// leader is the node Patroni's REST calls the primary, or "".
func leader() string {
	for _, n := range nodes {
		if restOK(n.rest, "/primary") {
			return n.name
		}
	}
	return ""
}

// settled reports a leader and a synchronous standby: the cluster as up.sh leaves it.
func settled() bool {
	if leader() == "" {
		return false
	}
	for _, n := range nodes {
		if restOK(n.rest, "/sync") {
			return true
		}
	}
	return false
}

func waitSettled(ctx context.Context, within time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	for !settled() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("no leader with a synchronous standby within %s", within)
		case <-time.After(250 * time.Millisecond):
		}
	}
	return nil
}

// switchover asks Patroni for a planned switchover to the standby.
func switchover(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "patronictl", "-c", filepath.Join(haDir, "pg1", "patroni.yml"),
		"switchover", "--force").CombinedOutput()
	return string(out), err
}

// crashLeader kills the leader's postmaster with SIGKILL, as a crash would.
func crashLeader() (string, int, error) {
	name := leader()
	if name == "" {
		return "", 0, fmt.Errorf("no leader to crash")
	}
	data, err := os.ReadFile(filepath.Join(haDir, name, "data", "postmaster.pid"))
	if err != nil {
		return name, 0, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(data), "\n", 2)[0]))
	if err != nil {
		return name, 0, err
	}
	return name, pid, syscall.Kill(pid, syscall.SIGKILL)
}
