package handlers

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"net/http"
	"strings"
)

// staticAsset is one embedded file with what its answer needs, computed once at start.
type staticAsset struct {
	body        []byte
	contentType string
	etag        string
}

// loadAssets reads the named files of dir in fsys, with their content types. A missing file
// is a build mistake, not a runtime state, so it panics at start.
func loadAssets(fsys embed.FS, dir string, types map[string]string) map[string]staticAsset {
	assets := make(map[string]staticAsset, len(types))
	for name, ct := range types {
		body, err := fsys.ReadFile(dir + "/" + name)
		if err != nil {
			panic("handlers: embedded asset missing: " + dir + "/" + name)
		}
		sum := sha256.Sum256(body)
		assets[name] = staticAsset{body: body, contentType: ct, etag: `"` + hex.EncodeToString(sum[:16]) + `"`}
	}
	return assets
}

// serveAsset answers one embedded file. The names carry no version, so browsers revalidate
// every time (no-cache) and get a 304 while the ETag still matches.
func serveAsset(w http.ResponseWriter, r *http.Request, assets map[string]staticAsset, name string) {
	a, ok := assets[name]
	if !ok {
		writeProblem(w, problem(http.StatusNotFound, "not_found", "no asset of that name"))
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

// servePage answers an HTML page under a Content-Security-Policy.
func servePage(w http.ResponseWriter, page []byte, csp string) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Security-Policy", csp)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-cache")
	_, _ = w.Write(page) // the client hung up; nothing to do
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
