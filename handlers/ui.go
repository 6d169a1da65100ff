package handlers

import (
	"embed"
	"net/http"
	"strings"
)

// The web console (GET /ui): plain HTML, CSS and small JavaScript modules, embedded in the
// binary, that read and write only through the public API, the same paths an SDK uses.
// Nothing is loaded from elsewhere and the Content-Security-Policy forbids it: no inline
// script or style, no other origin.
//
//go:embed ui_assets/index.html ui_assets/style.css ui_assets/*.js
var uiFiles embed.FS

// uiCSP allows the console's own script and style sheet and requests to this origin only.
// Styles set through the CSSOM (the progress bars' widths) need no 'unsafe-inline'.
const uiCSP = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; " +
	"img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

var uiPage = func() []byte {
	page, err := uiFiles.ReadFile("ui_assets/index.html")
	if err != nil {
		panic("handlers: embedded console page missing") // a build mistake, not a runtime state
	}
	return page
}()

// uiAssets are every script and the style sheet of ui_assets/, so that a module split off
// app.js is served without being listed twice.
var uiAssets = loadAssets(uiFiles, "ui_assets", func() map[string]string {
	entries, err := uiFiles.ReadDir("ui_assets")
	if err != nil {
		panic("handlers: embedded console assets missing") // a build mistake, not a runtime state
	}
	types := map[string]string{}
	for _, e := range entries {
		switch name := e.Name(); {
		case strings.HasSuffix(name, ".js"):
			types[name] = "text/javascript; charset=utf-8"
		case strings.HasSuffix(name, ".css"):
			types[name] = "text/css; charset=utf-8"
		}
	}
	return types
}())

// GetUI serves the console's page; its asset URLs are relative to /ui.
func (s *Server) GetUI(w http.ResponseWriter, r *http.Request) {
	servePage(w, uiPage, uiCSP)
}

// GetUIAsset serves the console's script and style sheet.
func (s *Server) GetUIAsset(w http.ResponseWriter, r *http.Request, asset string) {
	serveAsset(w, r, uiAssets, asset)
}
