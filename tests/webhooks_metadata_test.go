package tests

import (
	"net/http"
	"testing"

	"github.com/backfillsvc/backfill/webhooks"
	"github.com/stretchr/testify/require"
)

// Cloud metadata endpoints that are not link-local (AWS's IPv6 IMDS, Alibaba's, Azure's
// WireServer), the carrier-grade NAT range and a metadata address behind NAT64 are refused
// like loopback: at creation when the URL names them, and at delivery on the address dialed.
// WEBHOOK_ALLOW_LOCAL lets them through, as it does loopback.
func TestWebhookRefusesCloudMetadataAndCarrierNAT(t *testing.T) {
	t.Parallel()
	refused := map[string]string{
		"http://[fd00:ec2::254]/latest/meta-data/": "cloud metadata",
		"http://[fd20:ce::254]/computeMetadata/v1": "cloud metadata",
		"http://100.100.100.200/latest/meta-data":  "cloud metadata",
		"http://168.63.129.16/machine":             "cloud metadata",
		"http://100.64.0.1/hook":                   "carrier-grade NAT",
		"http://100.127.255.254:8080/hook":         "carrier-grade NAT",
		"http://[64:ff9b::a9fe:a9fe]/latest/":      "link-local",
		"http://[::ffff:100.100.100.200]/":         "cloud metadata",
	}
	strict := newEnv(t, withLocalWebhooksRefused())
	for target, kind := range refused {
		p := requireProblem(t, strict.Do(http.MethodPost, "/api/v1/webhooks", map[string]any{"url": target}),
			http.StatusUnprocessableEntity, "invalid_webhook", target)
		require.Contains(t, p.Detail, kind+" address", target)
	}
	for _, target := range []string{"http://100.63.255.255/hook", "http://100.128.0.1/hook", "http://[fd00:ec2::1]/hook"} {
		strict.createWebhook(target)
	}

	// Registered where local targets are allowed, then delivered by a deliverer that refuses
	// them: the refusal is on the address dialed, before any packet leaves.
	e := newEnv(t)
	ids := map[int64]string{}
	for target := range refused {
		ids[e.createWebhook(target).Id] = target
	}
	e.insertEvent("backfill.created", 1, "d")
	e.newDeliverer(webhooks.Config{}).runOnce(t)
	for id, target := range ids {
		log := e.webhookLog(id)
		require.Len(t, log, 1, target)
		require.Equal(t, "refused_address", string(*log[0].Error), target)
	}
}
