package tests

import (
	"os"
	"regexp"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// docs/OPERATIONS.md's backup list names every table of the migrated schema, and nothing
// else: a migration that adds a table without adding it there fails here, so a restore
// never misses state (pools, deleted_backfills, webhook_fanout, ...).
func TestOperationsBackupListNamesEveryTable(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../docs/OPERATIONS.md")
	require.NoError(t, err)
	para := regexp.MustCompile(`(?s)\*\*Backups\.\*\* All state is in the database: (.*?)\. Back it up`).FindSubmatch(doc)
	require.NotNil(t, para, "OPERATIONS has the Backups paragraph")
	var documented []string
	for _, m := range regexp.MustCompile("`([a-z_]+)`").FindAllSubmatch(para[1], -1) {
		documented = append(documented, string(m[1]))
	}
	require.Contains(t, string(para[1]), "goose's version table")

	e := newEnv(t)
	var tables []string
	// A partition is backed up with its table (the outbox's, migrations/00037).
	require.NoError(t, e.DB.Select(&tables, `SELECT c.relname FROM pg_class c
		WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r', 'p') AND NOT c.relispartition
		  AND c.relname NOT LIKE 'goose%'`))
	// The harness adds test_clock to every test database (internal/testkit/pgtest); no migration does.
	tables = slices.DeleteFunc(tables, func(s string) bool { return s == "test_clock" })
	slices.Sort(documented)
	slices.Sort(tables)
	require.Equal(t, tables, documented, "the tables of the migrated schema, and the tables OPERATIONS says to back up")
}
