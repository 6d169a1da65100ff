package tests

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// chromiumPath is Debian's chromium package; CI installs it (.ci/run).
const chromiumPath = "/usr/bin/chromium"

// redocBundleSHA256 is the digest docs_assets/README.md records for the vendored bundle.
const redocBundleSHA256 = "dcaf76612bc4a3fbcc923a8966dee2f6146a5f32e5ce1b6f02dd60cbbf89500b"

// The URLs in the page's src, href and spec-url attributes.
var docsPageRef = regexp.MustCompile(`(?i)\b(?:src|href|spec-url)\s*=\s*"([^"]*)"`)

func TestDocsPageIsHTMLThatReferencesOnlyThisServer(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withTokens("secret")) // the page needs no token, even when /api/v1 does
	res := e.Do(http.MethodGet, "/docs", nil)
	require.Equal(t, http.StatusOK, res.Status)
	require.Equal(t, "text/html; charset=utf-8", res.Header.Get("Content-Type"))
	csp := res.Header.Get("Content-Security-Policy")
	for _, directive := range []string{"default-src 'none'", "script-src 'self'", "connect-src 'self'"} {
		require.Contains(t, csp, directive)
	}
	page := string(res.Body)
	require.NotRegexp(t, `(?i)(https?:)?//`, page, "the page must not name another host")

	refs := docsPageRef.FindAllStringSubmatch(page, -1)
	require.NotEmpty(t, refs)
	base, err := url.Parse(e.URL + "/docs")
	require.NoError(t, err)
	var script, spec bool
	for _, m := range refs {
		ref, err := url.Parse(m[1])
		require.NoError(t, err)
		require.False(t, ref.IsAbs() || ref.Host != "", "%q is not a local URL", m[1])
		// Every reference resolves to something this server serves.
		abs := base.ResolveReference(ref)
		got := e.Do(http.MethodGet, abs.Path, nil)
		require.Equal(t, http.StatusOK, got.Status, "GET %s (from %q)", abs.Path, m[1])
		script = script || abs.Path == "/docs/redoc.standalone.js"
		spec = spec || abs.Path == "/openapi.yaml"
	}
	require.True(t, script, "the page loads the vendored Redoc bundle")
	require.True(t, spec, "the page renders the served spec")
}

func TestDocsAssetIsTheVendoredBundleAndRevalidates(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	res := e.Do(http.MethodGet, "/docs/redoc.standalone.js", nil)
	require.Equal(t, http.StatusOK, res.Status)
	require.Equal(t, "text/javascript; charset=utf-8", res.Header.Get("Content-Type"))
	sum := sha256.Sum256(res.Body)
	require.Equal(t, redocBundleSHA256, hex.EncodeToString(sum[:]),
		"the served bundle differs from the one handlers/docs_assets/README.md records")

	etag := res.Header.Get("ETag")
	require.NotEmpty(t, etag)
	again := e.Do(http.MethodGet, "/docs/redoc.standalone.js", nil, "If-None-Match", etag)
	require.Equal(t, http.StatusNotModified, again.Status)
	require.Empty(t, again.Body)
	changed := e.Do(http.MethodGet, "/docs/redoc.standalone.js", nil, "If-None-Match", `"stale"`)
	require.Equal(t, http.StatusOK, changed.Status)

	license := e.Do(http.MethodGet, "/docs/LICENSE", nil)
	require.Equal(t, http.StatusOK, license.Status)
	require.Contains(t, string(license.Body), "MIT License")

	missing := e.Do(http.MethodGet, "/docs/nope.js", nil)
	requireProblem(t, missing, http.StatusNotFound, "not_found")
}

// Redoc really renders the page in a browser, under the page's Content-Security-Policy and
// with no network but this server: the operations' summaries appear in the DOM only once
// Redoc has fetched and parsed /openapi.yaml.
func TestDocsPageRendersInChromium(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat(chromiumPath); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is missing: CI must install Debian's chromium package (apt-get install -y chromium)", chromiumPath)
		}
		t.Skipf("%s is missing; install Debian's chromium package (apt-get install -y chromium) to run this test", chromiumPath)
	}
	e := newEnv(t)
	dom, stderr, err := runChromium(t, "--dump-dom", e.URL+"/docs")
	require.NoError(t, err, "chromium failed; its stderr:\n%s", stderr)
	for _, summary := range []string{
		"Create a backfill", "Get a backfill", "Cancel a backfill",
		"Claim queued runs", "Extend a run's lease", "Create or replace a DAG",
		"Backfill service API", // the spec's title
	} {
		require.Contains(t, dom, summary, "Redoc did not render %q; chromium's stderr:\n%s", summary, stderr)
	}
	require.NotContains(t, dom, "Something went wrong", "Redoc reported an error")
	require.NotRegexp(t, `(?i)\bsrc="(https?:)?//`, dom, "the rendered page loads something from another host")
	// The Content-Security-Policy refuses nothing Redoc needs. It does refuse Redoc's footer
	// logo from its CDN, on purpose: no CDN at run time.
	for _, line := range strings.Split(stderr, "\n") {
		if strings.Contains(line, "Content Security Policy") && !strings.Contains(line, "cdn.redoc.ly/redoc/logo-mini.svg") {
			t.Errorf("the page's Content-Security-Policy refused something: %s", line)
		}
	}

	// DOCS_SCREENSHOT=/path/to/file.png keeps a picture of the page for a human to look at.
	if path := os.Getenv("DOCS_SCREENSHOT"); path != "" {
		_, stderr, err := runChromium(t, "--window-size=1400,1000", "--screenshot="+path, e.URL+"/docs")
		require.NoError(t, err, "chromium screenshot failed; its stderr:\n%s", stderr)
		t.Logf("screenshot of %s/docs written to %s", e.URL, path)
	}
}

// runChromium runs headless Chromium once with a fresh profile and returns its stdout and
// stderr. The virtual time budget lets the page's scripts, its fetch of the spec and Redoc's
// rendering finish before the DOM is dumped, without a wall-clock sleep.
func runChromium(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	// A guard against a hung browser, not a bound under test: several headless browsers of
	// the console's tests start beside this one, and on a loaded machine two minutes was not
	// enough for one of them to start, render and exit.
	limit := patient(2 * time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, chromiumPath, append([]string{
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic",
		"--no-first-run", "--disable-background-networking", "--disable-component-update",
		"--disable-sync", "--disable-breakpad", "--user-data-dir=" + t.TempDir(),
		"--virtual-time-budget=10000",
		// The page's console, CSP violations included, goes to stderr.
		"--enable-logging=stderr", "--v=0",
	}, args...)...)
	// Chromium writes caches and crash data under HOME as well as the profile.
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir())
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		err = fmt.Errorf("chromium did not finish within %s", limit)
	}
	return stdout.String(), stderr.String(), err
}

func TestRootRedirectsToTheConsoleAndDocsWithSlashToTheDocsPage(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for path, want := range map[string]struct {
		status   int
		location string
	}{"/": {http.StatusFound, "/ui"}, "/docs/": {http.StatusMovedPermanently, "/docs"}} {
		req, err := http.NewRequest(http.MethodGet, e.URL+path, nil)
		require.NoError(t, err)
		res, err := noFollow.Do(req)
		require.NoError(t, err)
		body, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		require.NoError(t, res.Body.Close())
		require.Equal(t, want.status, res.StatusCode, path)
		require.Equal(t, want.location, res.Header.Get("Location"), path)
		require.NoError(t, checkAgainstSpec(req, nil, &response{Status: res.StatusCode, Header: res.Header, Body: body}), path)
	}
	// A browser that follows the redirect ends on the console.
	res, err := e.HTTP.Get(e.URL + "/")
	require.NoError(t, err)
	defer res.Body.Close()
	page, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, string(page), "Backfill console")
}
