package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// ListEvents reads a page of lifecycle events after params.After, in id order; params may
// be nil. Ask again with After = NextAfter to never miss one.
func (c *Client) ListEvents(ctx context.Context, params *ListEventsParams) (EventCollection, error) {
	resp, err := c.raw().ListEvents(ctx, params)
	l, _, err := decode[EventCollection](resp, err, http.StatusOK)
	return l, err
}

// StreamProgress is the data of an event stream's progress message.
type StreamProgress struct {
	Progress   BackfillProgress `json:"progress"`
	State      BackfillState    `json:"state"`
	EtaSeconds *float64         `json:"eta_seconds"`
}

// StreamMessage is one message of a backfill's event stream: exactly one of Event (a stored
// lifecycle event) and Progress is set.
type StreamMessage struct {
	Event    *Event
	Progress *StreamProgress
}

// ErrStreamUnsupported is FollowBackfill's error against a server that has no event stream
// (an older version): fall back to WaitBackfill.
var ErrStreamUnsupported = errors.New("client: the server has no event stream")

// streamIdle is how long a stream may stay silent before it is taken for dead and resumed:
// the server sends a comment every 15 s.
const streamIdle = 45 * time.Second

// FollowBackfill iterates over a backfill's event stream: its stored events after `after`
// (0: all), then live events and progress messages, until the terminal event (included).
// A dropped connection, a silent one, a server that shuts down or answers 503 are resumed
// with Last-Event-ID, so no event is repeated or missed. The iteration stops at the first
// error it yields: ctx's error, a *ProblemError (backfill_not_found, ...) or
// ErrStreamUnsupported.
func (c *Client) FollowBackfill(ctx context.Context, id, after int64) iter.Seq2[StreamMessage, error] {
	return func(yield func(StreamMessage, error) bool) {
		last := after
		wait := time.Duration(0)
		for {
			if wait > 0 {
				t := time.NewTimer(wait)
				select {
				case <-ctx.Done():
					t.Stop()
					yield(StreamMessage{}, ctx.Err())
					return
				case <-t.C:
				}
			}
			ended, stop, err := c.followOnce(ctx, id, &last, yield)
			switch {
			case stop || ended:
				return
			case ctx.Err() != nil:
				yield(StreamMessage{}, ctx.Err())
				return
			case err != nil:
				var p *ProblemError
				if errors.As(err, &p) && !p.Temporary() {
					yield(StreamMessage{}, err)
					return
				}
				wait = min(max(2*wait, 500*time.Millisecond), 10*time.Second)
				if errors.As(err, &p) {
					wait = max(wait, p.RetryAfter)
				}
			default:
				wait = 0 // a clean end (server shutting down): resume at once
			}
		}
	}
}

// followOnce runs one connection of the stream. ended: the terminal event was yielded;
// stop: the caller stopped iterating or a permanent error was yielded.
func (c *Client) followOnce(ctx context.Context, id int64, last *int64, yield func(StreamMessage, error) bool) (ended, stop bool, err error) {
	raw, ok := c.Raw.ClientInterface.(*RawClient)
	if !ok {
		return false, true, errors.New("client: FollowBackfill needs the client made by New")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req, err := NewGetBackfillEventsRequest(raw.Server, id, nil)
	if err != nil {
		return false, !yield(StreamMessage{}, err), nil
	}
	req = req.WithContext(ctx)
	req.Header.Set("Accept", "text/event-stream")
	if *last > 0 {
		req.Header.Set("Last-Event-ID", strconv.FormatInt(*last, 10))
	}
	for _, edit := range raw.RequestEditors {
		if err := edit(ctx, req); err != nil {
			return false, !yield(StreamMessage{}, err), nil
		}
	}
	resp, err := streamDoer(raw.Client).Do(req)
	if err != nil {
		return false, false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		p := problemFrom(resp, body)
		if p.Code == ProblemCodeNotFound || p.Code == ProblemCodeMethodNotAllowed {
			return false, !yield(StreamMessage{}, ErrStreamUnsupported), nil
		}
		return false, false, p
	}
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		return false, !yield(StreamMessage{}, ErrStreamUnsupported), nil
	}

	// A watchdog: a stream silent for longer than the server's keep-alive is dead.
	idle := time.AfterFunc(streamIdle, cancel)
	defer idle.Stop()
	r := bufio.NewReader(resp.Body)
	var event, data, msgID string
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return false, false, err // io.EOF: the server ended the stream; resume
		}
		idle.Reset(streamIdle)
		line = strings.TrimRight(line, "\r\n")
		if line != "" {
			field, value, _ := strings.Cut(line, ":")
			value = strings.TrimPrefix(value, " ")
			switch field {
			case "event":
				event = value
			case "data":
				data += value
			case "id":
				msgID = value
			}
			continue
		}
		msg, terminal, err := parseStreamMessage(event, data)
		event, data = "", ""
		if err != nil {
			return false, !yield(StreamMessage{}, err), nil
		}
		if msgID != "" {
			if n, perr := strconv.ParseInt(msgID, 10, 64); perr == nil {
				*last = n
			}
			msgID = ""
		}
		if msg.Event == nil && msg.Progress == nil {
			continue // a comment
		}
		if !yield(msg, nil) {
			return false, true, nil
		}
		if terminal {
			return true, false, nil
		}
	}
}

func parseStreamMessage(event, data string) (StreamMessage, bool, error) {
	switch {
	case event == "" && data == "":
		return StreamMessage{}, false, nil
	case event == "progress":
		var p StreamProgress
		if err := json.Unmarshal([]byte(data), &p); err != nil {
			return StreamMessage{}, false, fmt.Errorf("client: a progress message: %w", err)
		}
		return StreamMessage{Progress: &p}, false, nil
	default:
		var ev Event
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			return StreamMessage{}, false, fmt.Errorf("client: an event message: %w", err)
		}
		terminal := ev.Type == EventTypeSucceeded || ev.Type == EventTypeFailed || ev.Type == EventTypeCanceled
		return StreamMessage{Event: &ev}, terminal, nil
	}
}

// streamDoer is the client's doer without a total timeout: an *http.Client's Timeout
// counts the reading of the body, and a stream is read for as long as it follows. The
// idle watchdog of followOnce takes its place.
func streamDoer(d HttpRequestDoer) HttpRequestDoer {
	hc, ok := d.(*http.Client)
	if !ok || hc.Timeout == 0 {
		return d
	}
	cp := *hc
	cp.Timeout = 0
	return &cp
}
