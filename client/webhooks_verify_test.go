package client

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"
	"testing"
	"time"
)

// The Standard Webhooks project's published example (its libraries' signing test):
// secret, message id, timestamp and payload, and the signature they must give.
const (
	specSecret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	specMsgID     = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	specTimestamp = 1614265330
	specPayload   = `{"test": 2432232314}`
	specSignature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
)

func headers(id string, ts int64, sig string) http.Header {
	h := http.Header{}
	h.Set("webhook-id", id)
	h.Set("webhook-timestamp", strconv.FormatInt(ts, 10))
	h.Set("webhook-signature", sig)
	return h
}

// sign computes the signature from the specification's definition with the standard library
// alone, independently of the library the verifier uses.
func sign(t *testing.T, secret, id string, ts int64, body string) string {
	t.Helper()
	key, err := base64.StdEncoding.DecodeString(secret[len("whsec_"):])
	if err != nil {
		t.Fatal(err)
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + strconv.FormatInt(ts, 10) + "." + body))
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

func TestSignatureOfTheSpecExampleIsThePublishedOne(t *testing.T) {
	if got := sign(t, specSecret, specMsgID, specTimestamp, specPayload); got != specSignature {
		t.Fatalf("signature %s, the specification's example says %s", got, specSignature)
	}
}

func TestVerifierAcceptsTheSpecExampleAndRejectsTampering(t *testing.T) {
	v, err := NewWebhookVerifier(specSecret)
	if err != nil {
		t.Fatal(err)
	}
	// The example's timestamp is from 2021: verification enforces the 5-minute tolerance.
	err = v.Verify(headers(specMsgID, specTimestamp, specSignature), []byte(specPayload))
	if !errors.Is(err, ErrWebhookTimestamp) {
		t.Fatalf("a 2021 timestamp: %v, want ErrWebhookTimestamp", err)
	}

	now := time.Now().Unix()
	good := sign(t, specSecret, specMsgID, now, specPayload)
	if err := v.Verify(headers(specMsgID, now, good), []byte(specPayload)); err != nil {
		t.Fatalf("a fresh, correctly signed delivery: %v", err)
	}
	// Several signatures, space-separated (secret rotation): one matching is enough.
	multi := "v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc= " + good
	if err := v.Verify(headers(specMsgID, now, multi), []byte(specPayload)); err != nil {
		t.Fatalf("with a second, stale signature: %v", err)
	}
	for name, tc := range map[string]struct {
		h    http.Header
		body string
	}{
		"body changed":      {headers(specMsgID, now, good), `{"test": 2432232315}`},
		"id changed":        {headers("msg_other", now, good), specPayload},
		"timestamp changed": {headers(specMsgID, now+1, good), specPayload},
		"other secret":      {headers(specMsgID, now, sign(t, "whsec_"+base64.StdEncoding.EncodeToString(make([]byte, 32)), specMsgID, now, specPayload)), specPayload},
		"no signature":      {headers(specMsgID, now, ""), specPayload},
		"wrong version":     {headers(specMsgID, now, "v2"+good[2:]), specPayload},
	} {
		if err := v.Verify(tc.h, []byte(tc.body)); !errors.Is(err, ErrWebhookSignature) {
			t.Errorf("%s: %v, want ErrWebhookSignature", name, err)
		}
	}
}
