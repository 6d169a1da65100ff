package tests

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// noImports ends the drawing's line (or lines) of packages that import none of the module's.
const noImports = ": none of the module's packages"

// TestArchitectureImportsAreTheModulesImports: docs/ARCHITECTURE.md's drawing under "Packages
// and their imports" names every package of the module that has production code, once, with
// exactly the module's packages it imports (go list's Imports: test files left out).
func TestArchitectureImportsAreTheModulesImports(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile(filepath.Join(repoRoot, "docs", "ARCHITECTURE.md"))
	require.NoError(t, err)
	claimed := parseImportDrawing(t, string(doc))

	out, err := exec.Command("go", "list", "-C", repoRoot, "-f",
		`{{if .GoFiles}}{{.Module.Path}} {{.ImportPath}} {{join .Imports " "}}{{end}}`, "./...").Output()
	require.NoError(t, err, "go list")
	actual := map[string][]string{}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 {
			continue
		}
		prefix := fields[0] + "/"
		pkg := strings.TrimPrefix(fields[1], prefix)
		imports := []string{}
		for _, imp := range fields[2:] {
			if rel, ok := strings.CutPrefix(imp, prefix); ok {
				imports = append(imports, rel)
			}
		}
		slices.Sort(imports)
		actual[pkg] = imports
	}
	require.NoError(t, sc.Err())
	require.NotEmpty(t, actual)
	require.Equal(t, actual, claimed,
		"docs/ARCHITECTURE.md's drawing of imports must be `go list -f '{{.ImportPath}}: {{join .Imports \" \"}}' ./...`, "+
			"the module's own packages only")
}

// parseImportDrawing reads the first code block after the "Packages and their imports"
// heading: lines "pkg ──► a, b, c   (a remark)", and one line (it may wrap) listing packages
// and ending in noImports. It fails the test on a package named twice.
func parseImportDrawing(t *testing.T, doc string) map[string][]string {
	t.Helper()
	_, after, ok := strings.Cut(doc, "### Packages and their imports")
	require.True(t, ok, "ARCHITECTURE.md has no \"Packages and their imports\" section")
	_, after, ok = strings.Cut(after, "```\n")
	require.True(t, ok, "no drawing under \"Packages and their imports\"")
	block, _, ok := strings.Cut(after, "```")
	require.True(t, ok, "the drawing's code block does not end")

	claimed := map[string][]string{}
	add := func(pkg string, imports []string) {
		_, dup := claimed[pkg]
		require.False(t, dup, "the drawing names %s twice", pkg)
		slices.Sort(imports)
		claimed[pkg] = imports
	}
	var pending strings.Builder // a list of packages without imports, until noImports
	for line := range strings.SplitSeq(block, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		if from, to, isArrow := strings.Cut(line, "►"); isArrow {
			pkg := strings.TrimSpace(strings.TrimRight(from, "─ "))
			if i := strings.Index(to, "("); i >= 0 {
				to = to[:i] // a remark
			}
			imports := []string{}
			for imp := range strings.SplitSeq(to, ",") {
				if imp = strings.TrimSpace(imp); imp != "" {
					imports = append(imports, imp)
				}
			}
			add(pkg, imports)
			continue
		}
		pending.WriteString(line + " ")
		if list, isNone := strings.CutSuffix(strings.TrimSpace(pending.String()), noImports); isNone {
			for pkg := range strings.SplitSeq(list, ",") {
				add(strings.TrimSpace(pkg), []string{})
			}
			pending.Reset()
		}
	}
	require.Empty(t, strings.TrimSpace(pending.String()), "a line of the drawing is neither an arrow nor ends in %q", noImports)
	return claimed
}
