// Package migrations holds the schema as embedded goose SQL files and applies them under a
// PostgreSQL session lock, so that several replicas can start against one database at once.
package migrations

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"

	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

// The numbered files only: schema.sql beside them is generated from them (make schema) and
// is no migration.
//
//go:embed [0-9][0-9][0-9][0-9][0-9]_*.sql
var files embed.FS

// NewProvider returns a goose provider over the embedded migrations that holds a Postgres
// advisory session lock while it runs.
func NewProvider(db *sql.DB) (*goose.Provider, error) {
	locker, err := lock.NewPostgresSessionLocker(
		// goose's default poll waits 5 s between attempts; replicas starting together should
		// not each pay that. 1 s is the shortest period goose accepts; 300 tries = 5 min.
		lock.WithLockTimeout(1, 300),
	)
	if err != nil {
		return nil, fmt.Errorf("migrations: session locker: %w", err)
	}
	sqlFiles, err := fs.Sub(files, ".")
	if err != nil {
		return nil, fmt.Errorf("migrations: embedded files: %w", err)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, sqlFiles, goose.WithSessionLocker(locker))
	if err != nil {
		return nil, fmt.Errorf("migrations: provider: %w", err)
	}
	return p, nil
}

// Up applies every pending migration.
func Up(ctx context.Context, db *sql.DB) error {
	p, err := NewProvider(db)
	if err != nil {
		return err
	}
	if _, err := p.Up(ctx); err != nil {
		return fmt.Errorf("migrations: up: %w", err)
	}
	return nil
}

// Pending reports whether the database lacks any migration the provider holds; /readyz uses
// it. GetVersions reads the version table without taking the session lock, so readiness
// probes never queue behind a replica that is migrating.
func Pending(ctx context.Context, p *goose.Provider) (bool, error) {
	current, target, err := p.GetVersions(ctx)
	if err != nil {
		return false, fmt.Errorf("migrations: versions: %w", err)
	}
	return current < target, nil
}
