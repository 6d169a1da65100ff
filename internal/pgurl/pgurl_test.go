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
