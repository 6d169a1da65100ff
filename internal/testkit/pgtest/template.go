package pgtest

// The template database: created and migrated once per test process, copied for every
// test, dropped with whatever is left when the process ends.

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/lib/pq"

	"github.com/backfillsvc/backfill/internal/pgurl"
	"github.com/backfillsvc/backfill/migrations"
)

// setUp connects to the server, sweeps databases that crashed runs left behind, and creates
// and migrates this process's template.
func setUp(ctx context.Context, adminURL *url.URL) (*state, error) {
	admin, err := sql.Open("postgres", adminURL.String())
	if err != nil {
		return nil, err
	}
	// A handful of connections is plenty (CREATEs are serialised, DROPs are quick) and
	// keeps a process's footprint small next to its tests' own pools.
	admin.SetMaxOpenConns(4)
	admin.SetMaxIdleConns(2)

	base, err := dbPrefix(os.Getenv(EnvPrefix))
	if err != nil {
		_ = admin.Close()
		return nil, err
	}
	token := randomToken()
	pid := os.Getpid()
	host, _ := os.Hostname()
	st := &state{
		adminURL:    adminURL,
		admin:       admin,
		dropSlots:   make(chan struct{}, 2),
		dropBacklog: make(chan struct{}, 8),
		template:    fmt.Sprintf("%stpl_%d_%s", base, pid, token),
		prefix:      fmt.Sprintf("%s%d_%s_", base, pid, token),
		comment:     fmt.Sprintf("pgtest host=%s pid=%d created=%s", strings.ReplaceAll(host, " ", "_"), pid, time.Now().UTC().Format(time.RFC3339)),
	}

	sweepStale(ctx, admin, base, host)

	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	if err := st.createDatabase(ctx, st.template, "template0"); err != nil {
		_ = admin.Close()
		return nil, err
	}
	if err := migrateTemplate(ctx, pgurl.Database(adminURL, st.template)); err != nil {
		st.tearDown()
		return nil, err
	}
	// No session may be connected to a template while it is copied. Forbidding connections
	// outright makes that hold even if a test somehow learns the template's name.
	if _, err := admin.ExecContext(ctx, "ALTER DATABASE "+pq.QuoteIdentifier(st.template)+" ALLOW_CONNECTIONS false"); err != nil {
		st.tearDown()
		return nil, fmt.Errorf("lock template %s: %w", st.template, err)
	}
	return st, nil
}

// migrateTemplate applies the migrations to the template and closes every connection it
// opened, since CREATE DATABASE ... TEMPLATE fails while any session is connected to it.
func migrateTemplate(ctx context.Context, dsn string) error {
	db, err := sql.Open("postgres", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	if err := migrations.Up(ctx, db); err != nil {
		return fmt.Errorf("migrate template: %w", err)
	}
	if _, err := db.ExecContext(ctx, testClockSQL); err != nil {
		return fmt.Errorf("install the test clock in the template: %w", err)
	}
	return db.Close()
}

// tearDown waits for the background drops, drops anything of this run they missed, then
// the template, and closes the admin pool: a normal run leaves no database behind.
func (st *state) tearDown() {
	st.drops.Wait()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var leftovers []string
	if rows, err := st.admin.QueryContext(ctx,
		`SELECT datname FROM pg_database WHERE starts_with(datname, $1)`, st.prefix); err == nil {
		for rows.Next() {
			var name string
			if rows.Scan(&name) == nil {
				leftovers = append(leftovers, name)
			}
		}
		_ = rows.Close()
	}
	for _, name := range append(leftovers, st.template) {
		if err := st.dropDatabase(name); err != nil {
			fmt.Fprintf(os.Stderr, "pgtest: %v\n", err)
		}
	}
	_ = st.admin.Close()
}

func randomToken() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b) // crypto/rand.Read never fails on supported platforms
	return hex.EncodeToString(b)
}
