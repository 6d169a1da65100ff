package pgtest

// Finding the server: TEST_DATABASE_URL, a local server, or a container.

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/backfillsvc/backfill/internal/pgurl"
	"github.com/testcontainers/testcontainers-go"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"
)

// server is a PostgreSQL server the harness found, and how to let it go afterwards.
type server struct {
	url  *url.URL
	stop func()
}

// findServer tries TEST_DATABASE_URL, then a local server, then a container, and returns
// the first that answers; otherwise an error listing every attempt and why it failed.
func findServer(ctx context.Context) (*server, error) {
	// An explicit TEST_DATABASE_URL is a decision: if it is wrong, say so rather than quietly
	// testing against some other server.
	if raw := os.Getenv(EnvURL); raw != "" {
		u, err := pgurl.Server(raw)
		if err != nil {
			return nil, fmt.Errorf("tried %s: %v", EnvURL, err)
		}
		if err := ping(ctx, u.String(), 15*time.Second); err != nil {
			return nil, fmt.Errorf("tried %s=%s: %v", EnvURL, u.Redacted(), err)
		}
		return &server{url: u, stop: func() {}}, nil
	}

	var tried []string
	tried = append(tried, fmt.Sprintf("  - %s: not set", EnvURL))

	local, _ := pgurl.Server(localURL)
	// Short: a local server either answers at once or is not there.
	err := ping(ctx, local.String(), 3*time.Second)
	if err == nil {
		return &server{url: local, stop: func() {}}, nil
	}
	tried = append(tried, fmt.Sprintf("  - local server %s: %v", local.Redacted(), err))

	srv, err := startContainer(ctx)
	if err == nil {
		return srv, nil
	}
	tried = append(tried, fmt.Sprintf("  - testcontainers %s: %v", containerImage, err))

	return nil, fmt.Errorf("tried, in order:\n%s\nSet %s to a PostgreSQL URL (e.g. postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable), start PostgreSQL on 127.0.0.1:5432 with trust auth for user postgres, or make Docker available",
		strings.Join(tried, "\n"), EnvURL)
}

// startContainer runs a disposable PostgreSQL in Docker. Its stop function terminates the
// container; testcontainers' reaper (Ryuk) removes it too if this process dies first.
func startContainer(ctx context.Context) (srv *server, err error) {
	// Docker detection in testcontainers has panicked in some releases when no engine is
	// present; a panic here would hide the list of what was tried.
	defer func() {
		if r := recover(); r != nil {
			srv, err = nil, fmt.Errorf("panic: %v", r)
		}
	}()

	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	ctr, err := tcpostgres.Run(ctx, containerImage, tcpostgres.BasicWaitStrategies())
	stop := func() {
		if ctr != nil {
			if err := testcontainers.TerminateContainer(ctr); err != nil {
				fmt.Fprintf(os.Stderr, "pgtest: terminate container: %v\n", err)
			}
		}
	}
	if err != nil {
		stop()
		return nil, err
	}
	raw, err := ctr.ConnectionString(ctx, "sslmode=disable")
	if err != nil {
		stop()
		return nil, err
	}
	u, err := pgurl.Server(raw)
	if err != nil {
		stop()
		return nil, err
	}
	if err := ping(ctx, u.String(), 30*time.Second); err != nil {
		stop()
		return nil, err
	}
	return &server{url: u, stop: stop}, nil
}

func ping(ctx context.Context, dsn string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	db, err := sql.Open("postgres", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	return db.PingContext(ctx)
}

// redact hides the password of a URL for messages; anything unparseable is shown as is.
func redact(dsn string) string {
	if u, err := url.Parse(dsn); err == nil {
		return u.Redacted()
	}
	return dsn
}
