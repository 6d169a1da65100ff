package startstop

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// service counts its runs and how many of them are running at once.
type service struct {
	Base
	runs, live, maxLive atomic.Int32
	exited              atomic.Int32
}

func newService() *service {
	s := &service{}
	s.Init(func(ctx context.Context) {
		s.runs.Add(1)
		n := s.live.Add(1)
		for {
			m := s.maxLive.Load()
			if n <= m || s.maxLive.CompareAndSwap(m, n) {
				break
			}
		}
		<-ctx.Done()
		time.Sleep(time.Millisecond) // an exit that takes time: Stop must wait for it
		s.live.Add(-1)
		s.exited.Add(1)
	}, nil)
	return s
}

func TestStopBeforeStartReturns(t *testing.T) {
	s := newService()
	s.Stop()
	s.Stop()
	require.False(t, s.Running())
	require.Zero(t, s.runs.Load())
}

func TestSecondStartIsANoOp(t *testing.T) {
	s := newService()
	require.NoError(t, s.Start(context.Background()))
	require.NoError(t, s.Start(context.Background()))
	require.Eventually(t, func() bool { return s.runs.Load() == 1 }, time.Second, time.Millisecond)
	require.True(t, s.Running())
	s.Stop()
	require.EqualValues(t, 1, s.runs.Load())
}

func TestStopWaitsForTheGoroutineAndIsIdempotent(t *testing.T) {
	s := newService()
	require.NoError(t, s.Start(context.Background()))
	require.Eventually(t, func() bool { return s.live.Load() == 1 }, time.Second, time.Millisecond)
	s.Stop()
	require.EqualValues(t, 1, s.exited.Load(), "Stop returned before the goroutine exited")
	require.False(t, s.Running())
	s.Stop()
	require.EqualValues(t, 1, s.exited.Load())
}

func TestRestartAfterStop(t *testing.T) {
	s := newService()
	for range 3 {
		started := s.Started()
		require.NoError(t, s.Start(context.Background()))
		<-started
		require.True(t, s.Running())
		s.Stop()
	}
	require.EqualValues(t, 3, s.runs.Load())
	require.EqualValues(t, 3, s.exited.Load())
	require.EqualValues(t, 1, s.maxLive.Load())
}

func TestCancelledParentEndsTheGoroutineAndStartRestarts(t *testing.T) {
	s := newService()
	ctx, cancel := context.WithCancel(context.Background())
	require.NoError(t, s.Start(ctx))
	cancel()
	require.Eventually(t, func() bool { return !s.Running() }, time.Second, time.Millisecond)
	require.EqualValues(t, 1, s.exited.Load())
	require.NoError(t, s.Start(context.Background()))
	require.Eventually(t, func() bool { return s.runs.Load() == 2 }, time.Second, time.Millisecond)
	s.Stop()
	require.EqualValues(t, 2, s.exited.Load())
}

func TestPrepareErrorAbortsStart(t *testing.T) {
	var ran atomic.Bool
	fail := true
	var b Base
	b.Init(func(ctx context.Context) { ran.Store(true); <-ctx.Done() }, func(context.Context) error {
		if fail {
			return errors.New("outbox unreadable")
		}
		return nil
	})
	require.EqualError(t, b.Start(context.Background()), "outbox unreadable")
	require.False(t, b.Running())
	b.Stop() // safe after a failed Start
	fail = false
	require.NoError(t, b.Start(context.Background()))
	require.True(t, b.Running())
	b.Stop()
	require.True(t, ran.Load())
}

// TestStressStartStop has many goroutines, released together, call Start and Stop at random
// while one watches: never two runs at once, every run that started also exited once Stop
// returned, and nothing is left running at the end.
func TestStressStartStop(t *testing.T) {
	s := newService()
	const workers, rounds = 32, 50
	release := make(chan struct{})
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			<-release
			for i := range rounds {
				if (w+i)%3 == 0 {
					s.Stop()
				} else {
					require.NoError(t, s.Start(context.Background()))
				}
			}
		})
	}
	close(release)
	wg.Wait()
	s.Stop()
	require.EqualValues(t, 1, s.maxLive.Load(), "two runs overlapped")
	require.Zero(t, s.live.Load())
	require.Equal(t, s.runs.Load(), s.exited.Load())
	require.Greater(t, s.runs.Load(), int32(1), "Stop and Start never interleaved")
}

// Started, taken before Start, is closed once the goroutine runs: a caller waits for
// "running" without polling. After Stop a new Start has a new channel.
func TestStartedIsClosedOnceTheGoroutineRuns(t *testing.T) {
	s := newService()
	started := s.Started()
	select {
	case <-started:
		t.Fatal("Started closed before Start")
	default:
	}
	require.NoError(t, s.Start(context.Background()))
	select {
	case <-started:
	case <-time.After(5 * time.Second):
		t.Fatal("Started not closed after Start")
	}
	require.True(t, s.Running())
	s.Stop()
	again := s.Started()
	select {
	case <-again:
		t.Fatal("Started of the next Start closed before it")
	default:
	}
	require.NoError(t, s.Start(context.Background()))
	<-again
	s.Stop()
}

// StopCause tells a Stop from the cancellation of Start's context and from a run that
// returned by itself.
func TestStopCauseSaysWhyTheGoroutineEnded(t *testing.T) {
	s := newService()
	require.NoError(t, s.StopCause())
	require.NoError(t, s.Start(context.Background()))
	<-s.Started()
	require.NoError(t, s.StopCause(), "no cause while running")
	s.Stop()
	require.ErrorIs(t, s.StopCause(), ErrStop)

	shutdown := errors.New("process shutting down")
	ctx, cancel := context.WithCancelCause(context.Background())
	require.NoError(t, s.Start(ctx))
	cancel(shutdown)
	require.Eventually(t, func() bool { return !s.Running() }, 5*time.Second, time.Millisecond)
	require.ErrorIs(t, s.StopCause(), shutdown)
	s.Stop()
	require.ErrorIs(t, s.StopCause(), shutdown, "a Stop after the goroutine ended changes nothing")

	var b Base
	b.Init(func(context.Context) {}, nil)
	require.NoError(t, b.Start(context.Background()))
	require.Eventually(t, func() bool { return !b.Running() }, 5*time.Second, time.Millisecond)
	require.ErrorIs(t, b.StopCause(), errReturned)
	b.Stop()
}
