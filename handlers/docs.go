package handlers

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"net/http"
	"strings"
)

// The API reference page: Redoc's standalone browser bundle, vendored from npm (see
// docs_assets/README.md for its version, license and how to update it), renders the spec this
// server serves at /openapi.yaml. Nothing is loaded from a CDN, and the Content-Security-Policy
// below forbids the browser from trying.
//
//go:embed docs_assets/redoc.standalone.js docs_assets/redoc.standalone.js.LICENSE.txt docs_assets/LICENSE
var docsFiles embed.FS

// docsPage is the whole page. Redoc finds the <redoc> element itself and reads its options
// from the attributes, so the page needs no inline script and the policy can say script-src
// 'self'. Both URLs are relative to /docs, so the page also works behind a path prefix.
const docsPage = `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Backfill service API reference</title>
<style>body { margin: 0; padding: 0; }</style>
</head>
<body>
<noscript>This page needs JavaScript. The API specification itself is at <a href="openapi.yaml">openapi.yaml</a>.</noscript>
<redoc spec-url="openapi.yaml" required-props-first="true" expand-responses="200,201" path-in-middle-panel="true"></redoc>
<script src="docs/redoc.standalone.js"></script>
</body>
</html>
`

// docsCSP lets Redoc run and nothing else: its own script from here, the spec fetched from
// here, the inline styles that styled-components injects, data: images and fonts from its
// theme, and its search index built in a Web Worker that it starts from a blob: URL. Tried in
// headless Chromium: without 'unsafe-inline' styles the page renders unstyled, and without
// worker-src blob: the search worker is refused. The one thing it blocks is Redoc's footer
// logo from cdn.redoc.ly, which Redoc then leaves out (its <img> drops itself on error).
const docsCSP = "default-src 'none'; script-src 'self'; style-src 'unsafe-inline'; " +
	"img-src 'self' data:; font-src 'self' data:; connect-src 'self'; worker-src blob:; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// docsAsset is one embedded file with what its answer needs, computed once at start.
type docsAsset struct {
	body        []byte
	contentType string
	etag        string
}

// docsAssets are the files /docs/{asset} serves, by name. The license files go with the
// bundle (it points at its LICENSE.txt by that relative name).
var docsAssets = func() map[string]docsAsset {
	types := map[string]string{
		"redoc.standalone.js":             "text/javascript; charset=utf-8",
		"redoc.standalone.js.LICENSE.txt": "text/plain; charset=utf-8",
		"LICENSE":                         "text/plain; charset=utf-8",
	}
	assets := make(map[string]docsAsset, len(types))
	for name, ct := range types {
		body, err := docsFiles.ReadFile("docs_assets/" + name)
		if err != nil {
			panic("handlers: embedded docs asset missing: " + name) // a build mistake, not a runtime state
		}
		sum := sha256.Sum256(body)
		assets[name] = docsAsset{body: body, contentType: ct, etag: `"` + hex.EncodeToString(sum[:16]) + `"`}
	}
	return assets
}()

// GetDocs serves the API reference page.
func (s *Server) GetDocs(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Security-Policy", docsCSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-cache")
	_, _ = w.Write([]byte(docsPage)) // the client hung up; nothing to do
}

// GetDocsAsset serves a file of the API reference page. The names carry no version, so
// browsers revalidate every time (no-cache) and get a 304 while the ETag still matches.
func (s *Server) GetDocsAsset(w http.ResponseWriter, r *http.Request, asset string) {
	a, ok := docsAssets[asset]
	if !ok {
		writeProblem(w, problem(http.StatusNotFound, "not_found", "no docs asset of that name"))
		return
	}
	h := w.Header()
	h.Set("ETag", a.etag)
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Content-Type-Options", "nosniff")
	if etagMatches(r.Header.Get("If-None-Match"), a.etag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	h.Set("Content-Type", a.contentType)
	_, _ = w.Write(a.body) // the client hung up; nothing to do
}

// etagMatches applies If-None-Match's weak comparison (RFC 9110 13.1.2) to one strong ETag.
func etagMatches(header, etag string) bool {
	for candidate := range strings.SplitSeq(header, ",") {
		candidate = strings.TrimSpace(candidate)
		if candidate == "*" || strings.TrimPrefix(candidate, "W/") == etag {
			return true
		}
	}
	return false
}

// GetRoot sends a person who opens the service's address to the API reference page.
func (s *Server) GetRoot(w http.ResponseWriter, r *http.Request) {
	http.Redirect(w, r, "/docs", http.StatusFound)
}

// GetDocsSlash sends /docs/ to /docs: the page's asset URLs are relative to /docs, so they
// would not resolve from /docs/.
func (s *Server) GetDocsSlash(w http.ResponseWriter, r *http.Request) {
	http.Redirect(w, r, "/docs", http.StatusMovedPermanently)
}
