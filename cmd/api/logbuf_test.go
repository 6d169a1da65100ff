package main

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// syncBuffer is a bytes.Buffer safe for the flusher goroutine and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestLogBufferHoldsInfoLinesUntilTheFlushAndWritesWarningsAtOnce(t *testing.T) {
	var out syncBuffer
	buf := newLogBuffer(&out, time.Hour) // no timed flush within the test
	logger := slog.New(newLogHandler(buf, slog.LevelInfo))

	logger.Info("request", "status", 200)
	require.Empty(t, out.String(), "an info line waits for the flush")

	logger.With("component", "x").Warn("slow")
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, 2, "a warning is written at once, after the lines before it")
	require.Contains(t, lines[0], `"msg":"request"`)
	require.Contains(t, lines[1], `"msg":"slow"`)

	logger.Info("last")
	buf.Close()
	require.Contains(t, out.String(), `"msg":"last"`, "Close writes what is left")
}

func TestLogBufferFlushesOnItsTicker(t *testing.T) {
	var out syncBuffer
	buf := newLogBuffer(&out, 10*time.Millisecond)
	defer buf.Close()
	slog.New(newLogHandler(buf, slog.LevelInfo)).Info("request")
	require.Eventually(t, func() bool { return strings.Contains(out.String(), `"msg":"request"`) },
		2*time.Second, 5*time.Millisecond)
}
