package tests

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// The triggers write the events of changes made by SQL outside the service's statements
// (migrations/00018_events_triggers_split.sql): a setting changed without raising
// settings_revision writes backfill.updated, before the state's event when one statement
// changes both; a setting set to its own value writes nothing; a statement that raises
// settings_revision writes its own event, and the trigger none; and a settings change keeps
// its event when a later statement of its transaction changes the state.
func TestEventTriggersWriteWhatOtherSQLChanges(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	b := e.DailyBackfill("trig", day(1, 1), day(1, 3))
	exec := func(sql string) {
		t.Helper()
		_, err := e.DB.ExecContext(ctx, sql, b.Id)
		require.NoError(t, err, sql)
	}
	types := func() []string { return evTypes(evOf(e, b.Id)) }

	exec(`UPDATE backfills SET max_active_runs = max_active_runs + 1, state = 'paused', pause_reason = 'user'
		WHERE id = $1`)
	evs := evOf(e, b.Id)
	require.Equal(t, []string{"backfill.created", "backfill.updated", "backfill.paused"}, evTypes(evs))
	require.Equal(t, evs[1].ID+1, evs[2].ID, "one transaction's events take consecutive ids, settings first")
	evRequireSnapshot(t, evs[1], evGetRaw(e, b.Id))
	evRequireSnapshot(t, evs[2], evGetRaw(e, b.Id))

	exec(`UPDATE backfills SET max_active_runs = max_active_runs, description = description WHERE id = $1`)
	require.Len(t, types(), 3, "a setting set to its own value is no change")

	exec(`UPDATE backfills SET max_active_runs = 7, settings_revision = settings_revision + 1 WHERE id = $1`)
	require.Len(t, types(), 3, "the trigger writes nothing for a statement that raises settings_revision (it writes its own)")

	tx, err := e.DB.BeginTx(ctx, nil)
	require.NoError(t, err)
	_, err = tx.ExecContext(ctx, `UPDATE backfills SET description = 'later unpaused' WHERE id = $1`, b.Id)
	require.NoError(t, err)
	_, err = tx.ExecContext(ctx, `UPDATE backfills SET state = 'running', pause_reason = NULL WHERE id = $1`, b.Id)
	require.NoError(t, err)
	require.NoError(t, tx.Commit())
	evs = evOf(e, b.Id)
	require.Equal(t, []string{"backfill.created", "backfill.updated", "backfill.paused", "backfill.updated", "backfill.unpaused"},
		evTypes(evs))
	get := evGetRaw(e, b.Id)
	evRequireSnapshot(t, evs[3], get) // the row at COMMIT, already unpaused
	evRequireSnapshot(t, evs[4], get)
}
