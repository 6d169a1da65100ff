package tests

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// Without WEBHOOK_ALLOW_LOCAL, a URL that names a loopback, link-local or unspecified address
// literally is 422 invalid_webhook at creation, naming the kind of address; ordinary hosts
// and names that only resolve somewhere are accepted (delivery judges those). With it, the
// local URLs are accepted.
func TestWebhookCreationRefusesLiteralLocalAddresses(t *testing.T) {
	t.Parallel()
	strict := newEnv(t, withLocalWebhooksRefused())
	refused := map[string]string{
		"http://127.0.0.1:8080/hook":               "loopback",
		"http://127.3.4.5/hook":                    "loopback",
		"http://localhost:9000/hook":               "loopback",
		"https://LOCALHOST./hook":                  "loopback",
		"http://api.localhost/hook":                "loopback",
		"http://[::1]:8080/hook":                   "loopback",
		"http://[::ffff:127.0.0.1]/hook":           "loopback",
		"http://169.254.169.254/latest/meta-data/": "link-local",
		"http://[fe80::1]/":                        "link-local",
		"http://0.0.0.0:8080/hook":                 "unspecified",
		"http://[::]/hook":                         "unspecified",
	}
	for target, kind := range refused {
		p := requireProblem(t, strict.Do(http.MethodPost, "/api/v1/webhooks", map[string]any{"url": target}),
			http.StatusUnprocessableEntity, "invalid_webhook", target)
		require.Contains(t, p.Detail, kind+" address", target)
		require.Contains(t, p.Detail, "WEBHOOK_ALLOW_LOCAL=true", target)
	}
	require.Zero(t, strict.Count(`SELECT count(*) FROM webhooks`))
	for _, target := range []string{"https://hooks.example.com/x", "http://10.0.0.5/hook", "http://localhost.example.com/hook"} {
		strict.createWebhook(target)
	}

	allowed := newEnv(t)
	for target := range refused {
		allowed.createWebhook(target)
	}
}
