package webhooks

import (
	"encoding/json"
	"net/netip"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/repo"
)

// The server signs the Standard Webhooks project's published example to the published value.
func TestSignedHeadersMatchTheSpecExample(t *testing.T) {
	h, err := signedHeaders("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "msg_p5jXN8AQM9LWM0D4loKWxJek",
		time.Unix(1614265330, 0), []byte(`{"test": 2432232314}`))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := h.Get("webhook-signature"), "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="; got != want {
		t.Fatalf("webhook-signature %s, want %s", got, want)
	}
	if h.Get("webhook-id") != "msg_p5jXN8AQM9LWM0D4loKWxJek" || h.Get("webhook-timestamp") != "1614265330" {
		t.Fatalf("headers %v", h)
	}
}

// The schedule: first retry within 10 s, each delay longer than the one before until the
// cap, and the retries together span at least 24 h even when the jitter shortens all.
func TestRetryScheduleSpansADayAndGrows(t *testing.T) {
	for range 200 {
		var total, prev time.Duration
		attempt := 1
		for {
			d, ok := retryDelay(attempt)
			if !ok {
				break
			}
			if attempt == 1 && d > 10*time.Second {
				t.Fatalf("first retry after %s, want within 10 s", d)
			}
			if d < prev*8/10 { // ±10 % jitter on both
				t.Fatalf("retry %d after %s, much shorter than the one before (%s)", attempt, d, prev)
			}
			if d > maxRetryDelay*11/10 {
				t.Fatalf("retry %d after %s, over the cap", attempt, d)
			}
			prev = d
			total += d
			attempt++
		}
		if attempt != maxAttempts {
			t.Fatalf("gave up after attempt %d, want %d", attempt, maxAttempts)
		}
		if total < 24*time.Hour {
			t.Fatalf("retries span %s, want at least 24 h", total)
		}
	}
}

func TestCheckAddrRefusesLoopbackLinkLocalAndUnspecified(t *testing.T) {
	for addr, refused := range map[string]bool{
		"127.0.0.1": true, "127.1.2.3": true, "::1": true, "::ffff:127.0.0.1": true,
		"169.254.169.254": true, "fe80::1": true, "0.0.0.0": true, "::": true,
		"10.0.0.1": false, "192.0.2.10": false, "2001:db8::1": false, "8.8.8.8": false,
	} {
		err := checkAddr(netip.MustParseAddr(addr))
		if (err != nil) != refused {
			t.Errorf("%s: %v, want refused=%v", addr, err, refused)
		}
	}
}

func TestEventJSONKeepsDataExactlyAndAnswersUTC(t *testing.T) {
	at := time.Date(2024, 3, 1, 12, 0, 0, 500000000, time.FixedZone("x", 3600))
	body, err := EventJSON(repo.WebhookEvent{ID: 7, Type: "backfill.created", BackfillID: 3, DagID: "d",
		OccurredAt: at, Data: repo.JSON(`{"backfill": {"n": 9007199254740993, "f": 1e400}}`)})
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]json.RawMessage
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatal(err)
	}
	if string(got["occurred_at"]) != `"2024-03-01T11:00:00.5Z"` {
		t.Errorf("occurred_at %s", got["occurred_at"])
	}
	if string(got["data"]) != `{"backfill":{"n":9007199254740993,"f":1e400}}` {
		t.Errorf("data %s", got["data"])
	}
}
