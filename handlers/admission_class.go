package handlers

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/backfillsvc/backfill/api"
	"github.com/getkin/kin-openapi/openapi3"
)

// classExtension is the spec's per-operation declaration of its admission class. Declared
// with the operation rather than guessed from its path here, so that a new operation cannot
// fall into a class nobody chose: the server does not start while one lacks it.
const classExtension = "x-admission-class"

// classNames are the values x-admission-class takes. ClassStream is not one: it is decided
// per request, by Accept (IsEventStream).
var classNames = map[string]AdmissionClass{
	"exempt":    ClassExempt,
	"heartbeat": ClassHeartbeat,
	"lease":     ClassLease,
	"claim":     ClassClaim,
	"default":   ClassDefault,
}

// classRoute is one operation's path, split into segments ("" for a path parameter), and
// its class.
type classRoute struct {
	segments []string
	class    AdmissionClass
}

// classTable finds a request's operation by method and path. Admission runs before routing
// and validation, so that shedding stays cheap: this is a walk over the few templates of the
// request's method and number of segments, without allocations, not the validator's route
// search. (A walk over all of a method's templates cost about 1 µs of every status read.)
type classTable struct {
	routes map[routeShape][]classRoute
}

// routeShape is what a path's templates are looked up by: its method and its number of
// segments (a template matches only paths with as many).
type routeShape struct {
	method   string
	segments int
}

// pathSegments is the number of segments of path (without its leading slash; a trailing
// slash ignored, as matchSegments ignores it).
func pathSegments(path string) int {
	rest := strings.TrimSuffix(path, "/")
	if rest == "" {
		return 0
	}
	return strings.Count(rest, "/") + 1
}

// admissionClasses is the class table of api/openapi.yaml, read once.
var admissionClasses = sync.OnceValues(func() (classTable, error) {
	doc, err := openapi3.NewLoader().LoadFromData(api.SpecYAML)
	if err != nil {
		return classTable{}, fmt.Errorf("load openapi spec: %w", err)
	}
	return newClassTable(doc)
})

// newClassTable reads every operation's x-admission-class; an operation without one, or with
// a value that names no class, is an error.
func newClassTable(doc *openapi3.T) (classTable, error) {
	t := classTable{routes: map[routeShape][]classRoute{}}
	for _, path := range doc.Paths.InMatchingOrder() {
		for method, op := range doc.Paths.Value(path).Operations() {
			name, _ := op.Extensions[classExtension].(string)
			class, ok := classNames[name]
			if !ok {
				return classTable{}, fmt.Errorf("%s %s (%s): %s is %q; want one of exempt, heartbeat, lease, claim, default",
					method, path, op.OperationID, classExtension, name)
			}
			var segments []string // "/" has none
			if path != "/" {
				segments = strings.Split(strings.TrimPrefix(path, "/"), "/")
			}
			for i, s := range segments {
				if strings.HasPrefix(s, "{") {
					segments[i] = ""
				}
			}
			shape := routeShape{method, len(segments)}
			t.routes[shape] = append(t.routes[shape], classRoute{segments: segments, class: class})
		}
	}
	// A literal segment wins over a parameter (/runs/claim over /runs/{run_id}): try the
	// templates with the fewest parameters first.
	for _, routes := range t.routes {
		slices.SortStableFunc(routes, func(a, b classRoute) int { return params(a.segments) - params(b.segments) })
	}
	return t, nil
}

func params(segments []string) int {
	n := 0
	for _, s := range segments {
		if s == "" {
			n++
		}
	}
	return n
}

// classify is the class of the operation r names. A stream request is ClassStream whatever
// its operation declares. A path the spec does not have (answered 404 after admission) is
// ClassDefault under /api/v1, so that a flood of them is shed like reads, and ClassExempt
// elsewhere.
func (t classTable) classify(r *http.Request) AdmissionClass {
	underAPI := strings.HasPrefix(r.URL.Path, "/api/v1/")
	if underAPI && IsEventStream(r) {
		return ClassStream
	}
	path := strings.TrimPrefix(r.URL.Path, "/")
	for _, route := range t.routes[routeShape{r.Method, pathSegments(path)}] {
		if matchSegments(route.segments, path) {
			return route.class
		}
	}
	if underAPI {
		return ClassDefault
	}
	return ClassExempt
}

// matchSegments reports whether path (without its leading slash) has the template's
// segments, "" standing for any one non-empty segment. A trailing slash is ignored, as it
// was by the path table this replaced.
func matchSegments(segments []string, path string) bool {
	rest := strings.TrimSuffix(path, "/")
	if len(segments) == 0 {
		return rest == ""
	}
	for i, want := range segments {
		seg, tail, more := strings.Cut(rest, "/")
		if (want == "" && seg == "") || (want != "" && seg != want) {
			return false
		}
		if more != (i < len(segments)-1) {
			return false
		}
		rest = tail
	}
	return true
}

// ClassifyRequest decides a request's class from its method and path alone, by the
// x-admission-class its operation declares in api/openapi.yaml.
func ClassifyRequest(r *http.Request) AdmissionClass {
	t, err := admissionClasses()
	if err != nil {
		return ClassDefault // New refuses to build a handler with this spec; nothing is served
	}
	return t.classify(r)
}
