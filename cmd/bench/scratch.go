package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log"
	"net/url"
	"os"
	"time"

	"github.com/lib/pq"

	"github.com/backfillsvc/backfill/internal/pgurl"
	"github.com/backfillsvc/backfill/migrations"
)

// scratch owns the databases a run creates on the server and everything that must be undone
// before they can be dropped (the service, connection pools), in reverse order.
type scratch struct {
	admin    *sql.DB
	adminURL *url.URL
	log      *log.Logger
	prefix   string
	dbs      []string
	closers  []func() error
}

func newScratch(ctx context.Context, serverURL string, logger *log.Logger) (*scratch, error) {
	u, err := pgurl.Server(serverURL)
	if err != nil {
		return nil, fmt.Errorf("the server URL: %w", err)
	}
	admin, err := sql.Open("postgres", u.String())
	if err != nil {
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := admin.PingContext(pctx); err != nil {
		admin.Close()
		return nil, fmt.Errorf("connect to %s: %w", u.Redacted(), err)
	}
	token := make([]byte, 3)
	_, _ = rand.Read(token)
	return &scratch{
		admin: admin, adminURL: u, log: logger,
		prefix: fmt.Sprintf("bench_%d_%s_", os.Getpid(), hex.EncodeToString(token)),
	}, nil
}

// create makes an empty database named after role, migrated with the service's own
// migrations when migrate is set (the floor's tables are then exactly the real ones), and
// returns its DSN.
func (s *scratch) create(ctx context.Context, role string, migrate bool) (string, error) {
	name := s.prefix + role
	if _, err := s.admin.ExecContext(ctx, "CREATE DATABASE "+pq.QuoteIdentifier(name)); err != nil {
		return "", fmt.Errorf("create scratch database %s: %w", name, err)
	}
	s.dbs = append(s.dbs, name)
	dsn := pgurl.Database(s.adminURL, name) // UTC sessions, like the service's
	if migrate {
		db, err := sql.Open("postgres", dsn)
		if err != nil {
			return "", err
		}
		defer db.Close()
		if err := migrations.Up(ctx, db); err != nil {
			return "", fmt.Errorf("migrate %s: %w", name, err)
		}
	}
	s.log.Printf("scratch database %s", name)
	return dsn, nil
}

func (s *scratch) onClose(f func() error) { s.closers = append(s.closers, f) }

// close undoes everything in reverse order and drops every scratch database.
func (s *scratch) close(ctx context.Context) error {
	var errs []error
	for i := len(s.closers) - 1; i >= 0; i-- {
		errs = append(errs, s.closers[i]())
	}
	for _, name := range s.dbs {
		// FORCE: a connection left behind by a failed scenario must not keep the database.
		if _, err := s.admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+pq.QuoteIdentifier(name)+" WITH (FORCE)"); err != nil {
			errs = append(errs, fmt.Errorf("drop scratch database %s: %w", name, err))
			continue
		}
		s.log.Printf("dropped %s", name)
	}
	errs = append(errs, s.admin.Close())
	return errors.Join(errs...)
}

// openDB opens a pool of at most conns connections, all kept idle between uses.
func openDB(dsn string, conns int) (*sql.DB, error) {
	db, err := sql.Open("postgres", dsn)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(conns)
	db.SetMaxIdleConns(conns)
	return db, nil
}
