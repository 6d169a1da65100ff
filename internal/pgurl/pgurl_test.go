package pgurl

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestServerFillsInSettingsAndDatabasePointsAtOne(t *testing.T) {
	u, err := Server("postgres://u:p@db:5432?sslmode=require")
	require.NoError(t, err)
	assert.Equal(t, "/postgres", u.Path)
	assert.Equal(t, "require", u.Query().Get("sslmode"), "an explicit sslmode is kept")
	assert.Equal(t, "UTC", u.Query().Get("timezone"))
	assert.Equal(t, "postgres://u:p@db:5432/bf_t_1?sslmode=require&timezone=UTC", Database(u, "bf_t_1"))
}

// A Unix-socket URL, as lib/pq accepts it, names its directory in the host parameter; the
// database it is pointed at keeps that parameter.
func TestServerTakesAUnixSocketURL(t *testing.T) {
	u, err := Server("postgres:///postgres?host=/var/run/postgresql&sslmode=disable")
	require.NoError(t, err)
	assert.Equal(t, "postgres:///bf_t_1?host=%2Fvar%2Frun%2Fpostgresql&sslmode=disable&timezone=UTC", Database(u, "bf_t_1"))

	_, err = Server("postgres:///postgres?sslmode=disable")
	require.Error(t, err, "neither a host nor a socket directory")
}
