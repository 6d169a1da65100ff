package main

import (
	"log/slog"
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
