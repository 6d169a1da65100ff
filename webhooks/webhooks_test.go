package webhooks

import (
	"context"
	"crypto/x509"
	"net"
	"net/netip"
	"net/url"
	"syscall"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/domain"
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

// The delivery log names the kind of a failure and never the addresses that a dial error's
// text carries (the target's, the resolver's).
func TestClassifyFailureNamesKindsWithoutAddresses(t *testing.T) {
	dnsErr := &net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{
		Err: "no such host", Name: "nope.invalid", Server: "10.96.0.10:53", IsNotFound: true}}
	refusedDial := &net.OpError{Op: "dial", Net: "tcp",
		Addr: &net.TCPAddr{IP: net.IPv4(10, 1, 2, 3), Port: 443}, Err: syscall.ECONNREFUSED}
	local := &RefusedAddressError{netip.MustParseAddr("127.0.0.1"), "loopback"}
	for name, c := range map[string]struct {
		status int
		err    error
		want   domain.DeliveryError
	}{
		"status":   {500, nil, domain.DeliveryErrorHTTPStatus},
		"redirect": {302, nil, domain.DeliveryErrorHTTPStatus},
		"dns":      {0, &url.Error{Op: "Post", URL: "https://nope.invalid/", Err: dnsErr}, domain.DeliveryErrorDNS},
		"refused":  {0, &url.Error{Op: "Post", URL: "https://x/", Err: refusedDial}, domain.DeliveryErrorConnectionRefused},
		"local":    {0, &url.Error{Op: "Post", URL: "http://x/", Err: &net.OpError{Op: "dial", Err: local}}, domain.DeliveryErrorRefusedAddress},
		"timeout":  {0, &url.Error{Op: "Post", URL: "https://x/", Err: context.DeadlineExceeded}, domain.DeliveryErrorTimeout},
		"tls":      {0, &url.Error{Op: "Post", URL: "https://x/", Err: x509.UnknownAuthorityError{}}, domain.DeliveryErrorTLS},
	} {
		if got := classifyFailure(c.status, c.err); got != c.want {
			t.Errorf("%s: %q, want %q", name, got, c.want)
		}
	}
}

func TestCheckAddrRefusesCloudMetadataAndCarrierNAT(t *testing.T) {
	for addr, refused := range map[string]bool{
		"fd00:ec2::254": true, "fd00:ec2::23": true, "fd20:ce::254": true, "fd00:c1::a9fe:a9fe": true,
		"100.100.100.200": true, "168.63.129.16": true, "192.0.0.192": true, "169.254.170.2": true,
		"100.64.0.0": true, "100.127.255.255": true, "::ffff:100.100.100.200": true,
		"64:ff9b::a9fe:a9fe": true, "64:ff9b::7f00:1": true, "fe80::1%eth0": true,
		"100.63.255.255": false, "100.128.0.0": false, "fd00:ec2::1": false, "64:ff9b::808:808": false,
	} {
		err := checkAddr(netip.MustParseAddr(addr))
		if (err != nil) != refused {
			t.Errorf("%s: %v, want refused=%v", addr, err, refused)
		}
	}
}
