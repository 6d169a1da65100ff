package main

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"sync"
	"time"
)

// logBuffer batches the log's writes: the access log writes a line per request, and one write
// system call per line cost about as much CPU as the JSON encoding of a status answer. Lines
// reach the underlying writer within flushEvery, or as soon as the buffer fills, and on
// Close; a warning or an error is written at once, with the lines before it (flushAtWarn).
// A line is never split: slog hands each record over in one Write.
//
// What a crash leaves unwritten is at most flushEvery of info lines; a panic's own message
// and stack go to stderr, unbuffered.
type logBuffer struct {
	mu   sync.Mutex
	w    *bufio.Writer
	stop chan struct{}
	done chan struct{}
}

const logFlushEvery = 100 * time.Millisecond

func newLogBuffer(w io.Writer, every time.Duration) *logBuffer {
	b := &logBuffer{w: bufio.NewWriterSize(w, 64<<10), stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(b.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				b.flush()
			case <-b.stop:
				return
			}
		}
	}()
	return b
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.w.Write(p)
}

func (b *logBuffer) flush() {
	b.mu.Lock()
	defer b.mu.Unlock()
	_ = b.w.Flush() // stdout gone: nothing to report it to
}

// Close stops the flusher and writes what is left.
func (b *logBuffer) Close() {
	close(b.stop)
	<-b.done
	b.flush()
}

// flushAtWarn writes a record of level warn or above through at once: an operator (or a
// test) reading the log right after a failed request finds its error there.
type flushAtWarn struct {
	slog.Handler
	buf *logBuffer
}

func (h flushAtWarn) Handle(ctx context.Context, r slog.Record) error {
	err := h.Handler.Handle(ctx, r)
	if r.Level >= slog.LevelWarn {
		h.buf.flush()
	}
	return err
}

func (h flushAtWarn) WithAttrs(attrs []slog.Attr) slog.Handler {
	return flushAtWarn{h.Handler.WithAttrs(attrs), h.buf}
}

func (h flushAtWarn) WithGroup(name string) slog.Handler {
	return flushAtWarn{h.Handler.WithGroup(name), h.buf}
}

// newLogHandler is the service's JSON log handler on w, flushing at warnings when w is a
// logBuffer.
func newLogHandler(w io.Writer, level slog.Level) slog.Handler {
	var h slog.Handler = slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level})
	if buf, ok := w.(*logBuffer); ok {
		h = flushAtWarn{h, buf}
	}
	return h
}
