package tests

import (
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// The docs make claims a newcomer acts on: a metric to alert on, a file to read, a test to run,
// a route to call, a flag to pass. The tests in this file hold each kind of claim that can be
// checked mechanically to what the code has, so that a rename or a removal fails here instead
// of leaving the docs to rot. (Settings and their defaults: cmd/api/defaults_test.go; the
// start-up line: cmd/api/config_test.go; the README walk-throughs: readme_test.go.)

// repoRoot is the module root, seen from this package's directory.
const repoRoot = ".."

// docFiles are the Markdown files whose claims are checked. docs/AIRFLOW.md is not one: the
// routes and paths it names are Airflow's, not this service's or this repository's.
var docFiles = []string{
	"README.md", "docs/ARCHITECTURE.md", "docs/BENCHMARKS.md", "docs/OPERATIONS.md",
	"docs/RELIABILITY.md", "docs/SCALING.md", "docs/HA.md", "docs/EXECUTOR.md",
	"docs/CONSOLE.md", "docs/GROUPS.md", "CHANGELOG.md",
}

// readDocs returns every checked doc's text by its path from the module root.
func readDocs(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, p := range docFiles {
		b, err := os.ReadFile(filepath.Join(repoRoot, p))
		require.NoError(t, err)
		out[p] = string(b)
	}
	return out
}

// moduleFiles returns the path from the module root of every file of the module, leaving out
// installed dependencies (node_modules) and Git's own files.
func moduleFiles(t *testing.T) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || d.Name() == ".git") {
			return filepath.SkipDir
		}
		if !d.IsDir() {
			rel, err := filepath.Rel(repoRoot, path)
			out = append(out, filepath.ToSlash(rel))
			return err
		}
		return nil
	})
	require.NoError(t, err)
	require.NotEmpty(t, out)
	return out
}

// sourceFiles returns the contents of the module's files whose names end in suffix, by path
// from the module root.
func sourceFiles(t *testing.T, suffix string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, rel := range moduleFiles(t) {
		if !strings.HasSuffix(rel, suffix) {
			continue
		}
		b, err := os.ReadFile(filepath.Join(repoRoot, rel))
		require.NoError(t, err)
		out[rel] = string(b)
	}
	require.NotEmpty(t, out)
	return out
}

var (
	// A metric's name where metrics/ registers it: an Opts Name or a Desc.
	metricDefined = regexp.MustCompile(`(?:Name:\s*|NewDesc\(\s*)"(backfill_[a-z_]+)"`)
	// A row of OPERATIONS.md's metrics table: name and type.
	metricRow = regexp.MustCompile("(?m)^\\| `(backfill_[a-z_]+)` \\| ([a-z]+) \\|")
	// A metric family in the text exposition format.
	metricType = regexp.MustCompile(`(?m)^# TYPE (backfill_[a-z_]+) ([a-z]+)$`)
)

// TestOperationsListsEveryMetricWithItsType: every metric the metrics package registers has a
// row in OPERATIONS.md's table, every row names a registered metric, and for every family a
// live server exposes the row's type is the exposed one.
func TestOperationsListsEveryMetricWithItsType(t *testing.T) {
	t.Parallel()
	defined := map[string]bool{}
	for path, src := range sourceFiles(t, ".go") {
		if !strings.HasPrefix(path, "metrics/") || strings.HasSuffix(path, "_test.go") {
			continue
		}
		for _, m := range metricDefined.FindAllStringSubmatch(src, -1) {
			defined[m[1]] = true
		}
	}
	require.NotEmpty(t, defined, "no metric found in metrics/: the pattern no longer matches the code")

	ops := readDocs(t)["docs/OPERATIONS.md"]
	documented := map[string]string{}
	for _, m := range metricRow.FindAllStringSubmatch(ops, -1) {
		documented[m[1]] = m[2]
	}
	for name := range defined {
		require.Contains(t, documented, name, "metrics/ registers %s; docs/OPERATIONS.md's metrics table does not list it", name)
	}
	for name := range documented {
		require.True(t, defined[name], "docs/OPERATIONS.md lists %s, which metrics/ does not register", name)
	}

	// A real scrape: the families exposed before any labelled series exists (plain counters,
	// histograms, gauges, the state gauges) and those the first request adds.
	e := newEnv(t)
	require.Equal(t, http.StatusOK, e.Do(http.MethodGet, "/api/v1/dags", nil).Status)
	scrape := string(e.Do(http.MethodGet, "/metrics", nil).Body)
	exposed := metricType.FindAllStringSubmatch(scrape, -1)
	require.NotEmpty(t, exposed)
	for _, m := range exposed {
		require.True(t, defined[m[1]], "the server exposes %s, which the pattern did not find in metrics/", m[1])
		require.Equal(t, m[2], documented[m[1]], "docs/OPERATIONS.md gives %s the wrong type", m[1])
	}
}

var (
	migrationFile = regexp.MustCompile(`\b(\d{5}_[a-z0-9_]+\.sql)\b`)
	// A row of ARCHITECTURE.md's migrations table.
	migrationRow = regexp.MustCompile("(?m)^\\| `(\\d{5}_[a-z0-9_]+\\.sql)` \\|")
)

// TestArchitectureListsEveryMigration: ARCHITECTURE.md's table has one row per file in
// migrations/, in order, and no doc names a migration that does not exist.
func TestArchitectureListsEveryMigration(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join(repoRoot, "migrations", "[0-9][0-9][0-9][0-9][0-9]_*.sql"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	var want []string
	for _, f := range files {
		want = append(want, filepath.Base(f))
	}
	docs := readDocs(t)
	var rows []string
	for _, m := range migrationRow.FindAllStringSubmatch(docs["docs/ARCHITECTURE.md"], -1) {
		rows = append(rows, m[1])
	}
	require.Equal(t, want, rows, "docs/ARCHITECTURE.md's migrations table must list migrations/*.sql, in order")
	for path, text := range docs {
		for _, m := range migrationFile.FindAllStringSubmatch(text, -1) {
			require.Contains(t, want, m[1], "%s names migration %s, which migrations/ does not have", path, m[1])
		}
	}
}

var (
	// A file named in code spans: a path, or a bare file name.
	codeSpanFile = regexp.MustCompile("`([A-Za-z0-9_./-]+\\.(?:go|sql|yaml|yml|md|svg|png|json|ts))`")
	// A relative Markdown link target.
	linkTarget = regexp.MustCompile(`\]\(([^)#:\s]+)(?:#[^)]*)?\)`)
)

// TestDocsNameOnlyFilesThatExist: a file a doc names in a code span or links to exists. A path
// is read from the module root (or, for links, from the doc's folder); a bare name must be
// some file's name in the module.
func TestDocsNameOnlyFilesThatExist(t *testing.T) {
	t.Parallel()
	names := map[string]bool{}
	for _, rel := range moduleFiles(t) {
		names[filepath.Base(rel)] = true
	}
	exists := func(p string) bool {
		_, err := os.Stat(filepath.Join(repoRoot, p))
		return err == nil
	}
	for path, text := range readDocs(t) {
		for _, m := range codeSpanFile.FindAllStringSubmatch(text, -1) {
			name := m[1]
			if strings.HasPrefix(name, "/") {
				continue // a URL path the server serves, such as /openapi.yaml
			}
			if strings.Contains(name, "/") {
				require.True(t, exists(name) || exists(filepath.Join(filepath.Dir(path), name)),
					"%s names %s, which does not exist", path, name)
				continue
			}
			require.True(t, names[name], "%s names %s, and no file in the module has that name", path, name)
		}
		for _, m := range linkTarget.FindAllStringSubmatch(text, -1) {
			require.True(t, exists(filepath.Join(filepath.Dir(path), m[1])), "%s links to %s, which does not exist", path, m[1])
		}
	}
}

var (
	testNamed = regexp.MustCompile(`\b((?:Test|Fuzz|Benchmark)[A-Z][A-Za-z0-9_]*)`)
	testFunc  = regexp.MustCompile(`(?m)^func ((?:Test|Fuzz|Benchmark)[A-Za-z0-9_]+)\(`)
)

// TestDocsNameOnlyTestsThatExist: every test, fuzz target or benchmark a doc names exists (or,
// where a doc gives a `-run` pattern such as TestTx, starts at least one test's name), so that
// a "Reproduce" command still runs what the doc says it runs.
func TestDocsNameOnlyTestsThatExist(t *testing.T) {
	t.Parallel()
	var funcs []string
	for _, src := range sourceFiles(t, "_test.go") {
		for _, m := range testFunc.FindAllStringSubmatch(src, -1) {
			funcs = append(funcs, m[1])
		}
	}
	require.NotEmpty(t, funcs)
	for path, text := range readDocs(t) {
		for _, m := range testNamed.FindAllStringSubmatch(text, -1) {
			name := m[1]
			require.True(t, slices.ContainsFunc(funcs, func(f string) bool { return strings.HasPrefix(f, name) }),
				"%s names %s, and no test function is or starts with that name", path, name)
		}
	}
}

// An HTTP call a doc writes out in a code span: method and path.
var docRoute = regexp.MustCompile("`(GET|POST|PUT|PATCH|DELETE) (/[^`\\s?]*)")

// TestDocsCallOnlyRoutesOfTheSpec: every "METHOD /path" a doc writes is an operation of
// api/openapi.yaml, whatever the doc calls the path's parameters; a path without the /api/v1
// prefix (the docs' shorthand) is read under it.
func TestDocsCallOnlyRoutesOfTheSpec(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(filepath.Join(repoRoot, "api", "openapi.yaml"))
	require.NoError(t, err)
	var spec struct {
		Paths map[string]map[string]any `yaml:"paths"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &spec))
	param := regexp.MustCompile(`\{[^}]*\}`)
	ops := map[string]bool{}
	for p, item := range spec.Paths {
		for method := range item {
			ops[strings.ToUpper(method)+" "+param.ReplaceAllString(p, "{}")] = true
		}
	}
	require.NotEmpty(t, ops)
	found := 0
	for path, text := range readDocs(t) {
		for _, m := range docRoute.FindAllStringSubmatch(text, -1) {
			found++
			p := param.ReplaceAllString(m[2], "{}")
			require.True(t, ops[m[1]+" "+p] || ops[m[1]+" /api/v1"+p],
				"%s calls `%s %s`, which api/openapi.yaml does not define", path, m[1], m[2])
		}
	}
	require.NotZero(t, found, "no route found in the docs: the pattern no longer matches them")
}

// codeOf returns a doc's code: its fenced blocks and inline code spans, where commands are
// written (prose says "make sure" too).
func codeOf(doc string) string {
	var b strings.Builder
	for i, part := range strings.Split(doc, "```") {
		if i%2 == 1 {
			b.WriteString(part + "\n")
			continue
		}
		for j, span := range strings.Split(part, "`") {
			if j%2 == 1 {
				b.WriteString(span + "\n")
			}
		}
	}
	return b.String()
}

var (
	makeTarget  = regexp.MustCompile(`\bmake ([a-z][a-z-]*)`)
	makeRule    = regexp.MustCompile(`(?m)^([a-z][a-z-]*):`)
	benchFlag   = regexp.MustCompile(`go run \./cmd/bench((?: -[a-z-]+(?: [^\s-][^\s]*)?)+)`)
	flagDefined = regexp.MustCompile(`fs\.[A-Za-z]+\("([a-z-]+)"`)
)

// TestDocsRunOnlyCommandsThatExist: every `make X` a doc mentions is a Makefile target, and
// every flag passed to `go run ./cmd/bench` is one cmd/bench defines.
func TestDocsRunOnlyCommandsThatExist(t *testing.T) {
	t.Parallel()
	mk, err := os.ReadFile(filepath.Join(repoRoot, "Makefile"))
	require.NoError(t, err)
	targets := map[string]bool{}
	for _, m := range makeRule.FindAllStringSubmatch(string(mk), -1) {
		targets[m[1]] = true
	}
	main, err := os.ReadFile(filepath.Join(repoRoot, "cmd", "bench", "main.go"))
	require.NoError(t, err)
	flags := map[string]bool{}
	for _, m := range flagDefined.FindAllStringSubmatch(string(main), -1) {
		flags[m[1]] = true
	}
	require.True(t, targets["bench"] && flags["only"], "the patterns no longer match the Makefile or cmd/bench")

	benchCalls := 0
	for path, doc := range readDocs(t) {
		text := codeOf(doc)
		for _, m := range makeTarget.FindAllStringSubmatch(text, -1) {
			require.True(t, targets[m[1]], "%s mentions `make %s`, which the Makefile does not define", path, m[1])
		}
		for _, m := range benchFlag.FindAllStringSubmatch(text, -1) {
			benchCalls++
			for _, f := range strings.Fields(m[1]) {
				if name, ok := strings.CutPrefix(f, "-"); ok {
					require.True(t, flags[name], "%s runs cmd/bench with -%s, which it does not define", path, name)
				}
			}
		}
	}
	require.NotZero(t, benchCalls)
}
