package tests

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/backfillsvc/backfill/client"
	"github.com/stretchr/testify/require"
)

// backfillctl webhooks add|list|rm|deliveries against a real server, over pipes.
func TestCLIWebhooks(t *testing.T) {
	t.Parallel()
	bin := buildCLI(t)
	e := newEnv(t)
	rc := newReceiver(t, nil)

	out := okCLI(t, bin, e, "webhooks", "add", rc.URL, "--event-type", "backfill.failed", "--event-type", "backfill.canceled",
		"--description", "from the CLI")
	m := regexp.MustCompile(`(?m)^ID:\s+(\d+)$`).FindStringSubmatch(out)
	require.NotNil(t, m, out)
	id := m[1]
	secret := regexp.MustCompile(`(?m)^SECRET:\s+(whsec_\S+)$`).FindStringSubmatch(out)
	require.NotNil(t, secret, out)
	require.Regexp(t, `(?m)^EVENT TYPES:\s+backfill.failed,backfill.canceled$`, out)
	require.Contains(t, out, "shown only now")

	out = okCLI(t, bin, e, "webhooks", "list")
	require.Regexp(t, `(?m)^`+id+`\s+`+regexp.QuoteMeta(rc.URL)+`\s+backfill.failed,backfill.canceled\s+\S+\s+from the CLI$`, out)
	require.NotContains(t, out, secret[1])
	var list client.WebhookCollection
	require.NoError(t, json.Unmarshal([]byte(okCLI(t, bin, e, "-o", "json", "webhooks", "list")), &list))
	require.EqualValues(t, 1, list.TotalEntries)

	event := e.insertEvent("backfill.failed", 1, "d")
	e.localDeliverer().runOnce(t)
	require.Len(t, rc.Got(), 1)
	require.NoError(t, client.VerifyWebhook(secret[1], rc.Got()[0].Header, rc.Got()[0].Body), "the printed secret verifies deliveries")
	out = okCLI(t, bin, e, "webhooks", "deliveries", id, "--event-id", fmt.Sprint(event))
	require.Regexp(t, `(?m)^EVENT_ID\s+ATTEMPT\s+ATTEMPTED_AT\s+STATUS\s+OUTCOME\s+NEXT_ATTEMPT_AT$`, out)
	require.Regexp(t, fmt.Sprintf(`(?m)^%d\s+1\s+\S+\s+204\s+delivered\s+-$`, event), out)

	r := runCLI(t, bin, e, "webhooks", "add", "ftp://example.com/x")
	require.Equal(t, 3, r.code)
	require.Contains(t, r.stderr, "invalid_webhook (422)")

	require.Equal(t, "webhook "+id+" deleted\n", okCLI(t, bin, e, "webhooks", "rm", id))
	r = runCLI(t, bin, e, "webhooks", "rm", id)
	require.Equal(t, 3, r.code)
	require.Contains(t, r.stderr, "webhook_not_found (404)")
	r = runCLI(t, bin, e, "webhooks", "rm")
	require.Equal(t, 3, r.code)
	require.True(t, strings.Contains(r.stderr, "webhook ID"), r.stderr)
}
