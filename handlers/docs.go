package handlers

import (
	"embed"
	"net/http"
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

// docsAssets are the files /docs/{asset} serves, by name. The license files go with the
// bundle (it points at its LICENSE.txt by that relative name).
var docsAssets = loadAssets(docsFiles, "docs_assets", map[string]string{
	"redoc.standalone.js":             "text/javascript; charset=utf-8",
	"redoc.standalone.js.LICENSE.txt": "text/plain; charset=utf-8",
	"LICENSE":                         "text/plain; charset=utf-8",
})

// GetDocs serves the API reference page.
func (s *Server) GetDocs(w http.ResponseWriter, r *http.Request) {
	servePage(w, []byte(docsPage), docsCSP)
}

// GetDocsAsset serves a file of the API reference page.
func (s *Server) GetDocsAsset(w http.ResponseWriter, r *http.Request, asset string) {
	serveAsset(w, r, docsAssets, asset)
}

// GetRoot sends a person who opens the service's address to the web console.
func (s *Server) GetRoot(w http.ResponseWriter, r *http.Request) {
	http.Redirect(w, r, "/ui", http.StatusFound)
}

// GetDocsSlash sends /docs/ to /docs: the page's asset URLs are relative to /docs, so they
// would not resolve from /docs/.
func (s *Server) GetDocsSlash(w http.ResponseWriter, r *http.Request) {
	http.Redirect(w, r, "/docs", http.StatusMovedPermanently)
}
