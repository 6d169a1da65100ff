package main

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestLogLevelIsReadFromTheEnvironment(t *testing.T) {
	env := map[string]string{"DATABASE_URL": "postgres://u@h/db?sslmode=disable"}
	cfg, err := loadConfig(getenvFrom(env))
	require.NoError(t, err)
	require.Equal(t, slog.LevelInfo, cfg.LogLevel, "info by default")

	env["LOG_LEVEL"] = "debug"
	cfg, err = loadConfig(getenvFrom(env))
	require.NoError(t, err)
	require.Equal(t, slog.LevelDebug, cfg.LogLevel)

	env["LOG_LEVEL"] = "chatty"
	_, err = loadConfig(getenvFrom(env))
	require.ErrorContains(t, err, "LOG_LEVEL")
}

// The startup line names every setting the process reads, by its variable's name.
func TestStartupLineListsEverySetting(t *testing.T) {
	asked := map[string]bool{}
	cfg, err := loadConfig(func(name string) string {
		asked[name] = true
		if name == "DATABASE_URL" {
			return "postgres://u:s3cret@h/db?sslmode=disable"
		}
		return ""
	})
	require.NoError(t, err)
	attrs := cfg.logAttrs()
	keys := map[string]bool{}
	for i := 0; i < len(attrs); i += 2 {
		keys[attrs[i].(string)] = true
		require.NotContains(t, fmt.Sprint(attrs[i+1]), "s3cret", "the password is masked")
	}
	require.NotEmpty(t, asked)
	for name := range asked {
		require.True(t, keys[strings.ToLower(name)], "the startup line lacks %s", name)
	}
}

// DB_POOLER says whether the hot statements may be prepared on the pool: none (the default)
// or transaction; anything else is refused at start rather than guessed.
func TestDBPoolerIsNoneByDefaultAndOnlyNoneOrTransaction(t *testing.T) {
	env := map[string]string{"DATABASE_URL": "postgres://u@h/db?sslmode=disable"}
	cfg, err := loadConfig(getenvFrom(env))
	require.NoError(t, err)
	require.Equal(t, "none", cfg.DBPooler)

	env["DB_POOLER"] = "transaction"
	cfg, err = loadConfig(getenvFrom(env))
	require.NoError(t, err)
	require.Equal(t, "transaction", cfg.DBPooler)

	env["DB_POOLER"] = "pgbouncer"
	_, err = loadConfig(getenvFrom(env))
	require.ErrorContains(t, err, "DB_POOLER")
}
