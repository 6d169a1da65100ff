package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The failover settings have defaults that ride a one-to-two-second failover and retire
// pooled connections within a minute, can be changed, and refuse nonsense.
func TestConfigFailoverSettings(t *testing.T) {
	env := func(kv map[string]string) func(string) string {
		return func(k string) string { return kv[k] }
	}
	cfg, err := loadConfig(env(map[string]string{"DATABASE_URL": "postgres://u@h/db"}))
	require.NoError(t, err)
	require.Equal(t, 5*time.Second, cfg.DBReconnectWait)
	require.Equal(t, time.Minute, cfg.DBConnMaxLifetime)

	cfg, err = loadConfig(env(map[string]string{"DATABASE_URL": "postgres://u@h/db",
		"DB_RECONNECT_WAIT": "1500ms", "DB_CONN_MAX_LIFETIME": "10m"}))
	require.NoError(t, err)
	require.Equal(t, 1500*time.Millisecond, cfg.DBReconnectWait)
	require.Equal(t, 10*time.Minute, cfg.DBConnMaxLifetime)

	_, err = loadConfig(env(map[string]string{"DATABASE_URL": "postgres://u@h/db",
		"DB_RECONNECT_WAIT": "0s", "DB_CONN_MAX_LIFETIME": "soon"}))
	require.ErrorContains(t, err, "DB_RECONNECT_WAIT")
	require.ErrorContains(t, err, "DB_CONN_MAX_LIFETIME")
}

// A DSN that would connect elsewhere stops the process at start, before anything is opened.
func TestRunRefusesAnAmbiguousDSN(t *testing.T) {
	err := run(t.Context(), nil, func(k string) string {
		if k == "DATABASE_URL" {
			return "host=db1:5433,db2:5434 dbname=bf target_session_attrs=read-write"
		}
		return ""
	}, nil)
	require.ErrorContains(t, err, "contains a port")
}
