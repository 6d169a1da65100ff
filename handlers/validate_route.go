package handlers

import (
	"net/http"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/routers"
)

// specRoutes finds a request's route of the spec as kin-openapi's gorillamux router does, by
// comparing path segments instead of running a regular expression per route until one
// matches: that search was a third of the validator's CPU on a worker's claim and report.
// The router's rules, which find repeats: the spec's paths are tried in
// openapi3.Paths.InMatchingOrder, the first whose path matches wins, a {variable} stands for
// one non-empty segment of the escaped path, and the route's operation is the one of the
// request's method. find answers only what it is sure the router would answer the same way;
// anything else (no match, a method the path does not take, a path with characters that its
// escaped form would change, a template that is not whole segments) goes to the router, so
// that 404 and 405 stay its answers. validate_route_test.go compares the two.
type specRoutes struct {
	doc    *openapi3.T
	server *openapi3.Server
	paths  []routeTemplate
}

// routeTemplate is one spec path: segments without the leading slash, names[i] the variable
// of segment i ("" for a literal one).
type routeTemplate struct {
	path     string
	segments []string
	names    []string
	simple   bool // every variable is a whole segment
}

func newSpecRoutes(doc *openapi3.T) specRoutes {
	out := specRoutes{doc: doc}
	if len(doc.Servers) == 1 && doc.Servers[0].URL == "/" {
		out.server = doc.Servers[0]
	}
	for _, path := range doc.Paths.InMatchingOrder() {
		t := routeTemplate{path: path, simple: true}
		t.segments = strings.Split(strings.TrimPrefix(path, "/"), "/")
		t.names = make([]string, len(t.segments))
		for i, s := range t.segments {
			if strings.HasPrefix(s, "{") && strings.HasSuffix(s, "}") && strings.Count(s, "{") == 1 {
				t.names[i] = s[1 : len(s)-1]
				t.segments[i] = ""
			} else if strings.ContainsAny(s, "{}") {
				t.simple = false
			}
		}
		out.paths = append(out.paths, t)
	}
	return out
}

// find returns r's route and path parameters, or nil when the router must answer.
func (s specRoutes) find(r *http.Request) (*routers.Route, map[string]string) {
	if s.server == nil || r.URL.RawPath != "" || !plainPath(r.URL.Path) {
		return nil, nil
	}
	path := strings.TrimPrefix(r.URL.Path, "/")
	for i := range s.paths {
		t := &s.paths[i]
		if !t.simple {
			return nil, nil // whether it matches is the router's to say
		}
		if !t.matches(path) {
			continue
		}
		op := s.doc.Paths.Value(t.path).GetOperation(r.Method)
		if op == nil {
			return nil, nil
		}
		params := make(map[string]string, 2)
		rest := path
		for _, name := range t.names {
			seg, tail, _ := strings.Cut(rest, "/")
			rest = tail
			if name != "" {
				params[name] = seg
			}
		}
		return &routers.Route{
			Spec: s.doc, Server: s.server, Path: t.path, PathItem: s.doc.Paths.Value(t.path),
			Method: r.Method, Operation: op,
		}, params
	}
	return nil, nil
}

func (t *routeTemplate) matches(path string) bool {
	rest := path
	for i, want := range t.segments {
		seg, tail, more := strings.Cut(rest, "/")
		if more != (i < len(t.segments)-1) {
			return false
		}
		rest = tail
		if t.names[i] != "" {
			if seg == "" {
				return false
			}
		} else if seg != want {
			return false
		}
	}
	return true
}

// plainPath is a path that url.URL.EscapedPath leaves as it is (letters, digits and the
// characters a path segment may hold unescaped), the form the router matches.
func plainPath(p string) bool {
	for i := 0; i < len(p); i++ {
		c := p[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' {
			continue
		}
		switch c {
		case '/', '-', '_', '.', '~', '$', '&', '+', ',', ':', ';', '=', '@':
			continue
		}
		return false
	}
	return p != "" && p != "*"
}
