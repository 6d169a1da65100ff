package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Targets of P8, the event streams.
const (
	targetStreamsP99 = 1.20 // ordinary requests' p99 with the streams ≤ 1.2 × without
)

// streamsResult is P8.
type streamsResult struct {
	streams, backfills int
	without, with      loadResult // GET /backfills/{id}, closed loop
	rest, open         memory     // the service's memory before opening and with the streams open
	memErr             error
}

// scenarioStreams is P8: the p99 of ordinary requests (GET /backfills/{id} from the P2
// clients) without and then with 1,000 Server-Sent Events streams open on the one replica,
// and the replica's memory with them. The streams follow 10 backfills; in both phases one
// backfill is paused and unpaused every 200 ms, so that events and progress flow to the
// streams, and the load around them is the same with and without them.
func (b *bench) scenarioStreams(ctx context.Context) (streamsResult, error) {
	res := streamsResult{streams: 1_000, backfills: 10}
	if b.cfg.smoke {
		res.streams = 50
	}
	ids := make([]int64, res.backfills)
	for i := range ids {
		_, id, err := b.serviceCreate(ctx, newWindow(fmt.Sprintf("p8_%d", i), 50), 10)
		if err != nil {
			return res, err
		}
		ids[i] = id
	}
	// On a loaded machine admission (18 requests at once with the shipped pool) may shed a
	// GET of the 32 clients with 503 busy: the client sends it again at once, as P9's do, its
	// time running on (the p99 counts the wait for the 503 too), and each phase says how many.
	var refused atomic.Int64
	get := func(ctx context.Context, worker int) error {
		u := b.url("/backfills/" + strconv.FormatInt(ids[worker%len(ids)], 10))
		return resendShed(ctx, &refused, func() error {
			return call(ctx, b.client, http.MethodGet, u, nil, http.StatusOK, nil)
		})
	}
	actx, stopActivity := context.WithCancel(ctx)
	defer stopActivity()
	activity := b.toggleLoop(actx, ids[0])

	measure := func() (loadResult, error) {
		if _, err := closedLoop(ctx, b.cfg.statusClients, 500*time.Millisecond, get); err != nil { // warm
			return loadResult{}, err
		}
		refused.Store(0)
		r, err := closedLoop(ctx, b.cfg.statusClients, b.cfg.loadDuration, get)
		if n := refused.Load(); n > 0 {
			b.log.Printf("P8: %d GETs answered 503 busy and sent again", n)
		}
		return r, err
	}
	var err error
	if res.without, err = measure(); err != nil {
		return res, fmt.Errorf("without streams: %w", err)
	}
	res.rest, res.memErr = b.svc.memory()

	sctx, closeStreams := context.WithCancel(ctx)
	defer closeStreams()
	var wg sync.WaitGroup
	opened := make(chan error, res.streams)
	// One connection per stream, as browsers and CLIs would hold them.
	streamClient := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 0, DisableCompression: true}}
	for i := range res.streams {
		wg.Go(func() { b.followStream(sctx, streamClient, ids[i%len(ids)], opened) })
	}
	for range res.streams {
		if err := <-opened; err != nil {
			return res, fmt.Errorf("open stream: %w", err)
		}
	}
	b.log.Printf("P8 %d streams open", res.streams)
	if res.with, err = measure(); err != nil {
		return res, fmt.Errorf("with streams: %w", err)
	}
	if res.memErr == nil {
		res.open, res.memErr = b.svc.memory()
	}
	closeStreams()
	wg.Wait()
	stopActivity()
	if err := <-activity; err != nil {
		return res, fmt.Errorf("pause/unpause activity: %w", err)
	}
	b.log.Printf("P8 GET p99 without streams %v, with %d streams %v", res.without.quantile(0.99).Round(time.Microsecond),
		res.streams, res.with.quantile(0.99).Round(time.Microsecond))
	return res, nil
}

// followStream opens one stream, reports once its first message has arrived, and reads it
// until ctx ends.
func (b *bench) followStream(ctx context.Context, c *http.Client, id int64, opened chan<- error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.url("/backfills/"+strconv.FormatInt(id, 10)+"/events"), nil)
	if err != nil {
		opened <- err
		return
	}
	req.Header.Set("Accept", "text/event-stream")
	resp, err := c.Do(req)
	if err != nil {
		opened <- err
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		opened <- fmt.Errorf("backfill %d: status %d", id, resp.StatusCode)
		return
	}
	r := bufio.NewReader(resp.Body)
	first := true
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			if first {
				opened <- err
			}
			return
		}
		if first && strings.TrimSpace(line) == "" {
			first = false
			opened <- nil
		}
	}
}

// toggleLoop pauses and unpauses a backfill every 200 ms until ctx ends; the channel gets the
// first error, or nil.
func (b *bench) toggleLoop(ctx context.Context, id int64) <-chan error {
	out := make(chan error, 1)
	go func() {
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		actions := []string{"pause", "unpause"}
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				out <- nil
				return
			case <-t.C:
			}
			// Shed with 503 busy on a loaded machine (the smoke run beside the test suites),
			// the toggle is sent again, as the GETs are: it only keeps events
			// flowing.
			var refused atomic.Int64
			err := resendShed(ctx, &refused, func() error {
				return call(ctx, b.client, http.MethodPut, b.url(fmt.Sprintf("/backfills/%d/%s", id, actions[i%2])), nil, http.StatusOK, nil)
			})
			if n := refused.Load(); n > 0 {
				b.log.Printf("P8: a %s answered 503 busy and was sent again %d times", actions[i%2], n)
			}
			if err != nil && ctx.Err() == nil {
				out <- err
				return
			}
		}
	}()
	return out
}

func streamsRows(s streamsResult) []row {
	ratio := float64(s.with.quantile(0.99)) / float64(max(s.without.quantile(0.99), 1))
	rows := []row{{
		fmt.Sprintf("P8 GET backfill p99 with %s event streams open (%d backfills, 32 clients)", count(s.streams), s.backfills),
		fmt.Sprintf("p99 %s (%s)", dur(s.with.quantile(0.99)), rate(s.with.perSecond(), "req/s")),
		fmt.Sprintf("p99 %s (%s) without", dur(s.without.quantile(0.99)), rate(s.without.perSecond(), "req/s")),
		ratioStr(ratio), fmt.Sprintf("≤ %.2f", targetStreamsP99), verdict(ratio <= targetStreamsP99)}}
	name := fmt.Sprintf("P8 service memory with %s event streams open", count(s.streams))
	if s.memErr != nil {
		return append(rows, row{name, "not measured: " + s.memErr.Error(), "—", "—", fmt.Sprintf("≤ %d MiB", targetMemoryMiB), "—"})
	}
	above := float64(s.open.rss-s.rest.rss) / (1 << 20)
	return append(rows, row{name, fmt.Sprintf("+%.0f MiB (RSS %.0f MiB)", above, float64(s.open.rss)/(1<<20)),
		fmt.Sprintf("before %.0f MiB", float64(s.rest.rss)/(1<<20)), "—",
		fmt.Sprintf("≤ %d MiB", targetMemoryMiB), verdict(above <= targetMemoryMiB)})
}
