package tests

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// testkitPath is where the test rigs live: the database harness, the fault proxy, the
// invariant checks, the fake Airflow. They open databases, cut connections and fake servers,
// none of which a binary of the service may do.
const testkitPath = "github.com/backfillsvc/backfill/internal/testkit/"

// testOnlyTrees are the module's trees whose packages exist for tests: the test kit itself and
// tests/ (its helpers, such as tests/internal/loadkit, are rigs too).
var testOnlyTrees = []string{testkitPath, "github.com/backfillsvc/backfill/tests"}

// No package built into a binary imports the test kit, directly or through another package:
// `go list -deps` walks each package's production imports (test files left out), with every
// build tag the module uses. cmd/bench is held to it too: it is a development tool, but it
// drives the service's own packages against a real server and has no business with a rig.
func TestNoProductionPackageImportsTheTestKit(t *testing.T) {
	for _, tags := range []string{"", "faults,ha,benchnoevents"} {
		cmd := exec.Command("go", "list", "-tags", tags, "-deps",
			"-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, "./...")
		cmd.Dir = repoRoot
		out, err := cmd.Output()
		require.NoError(t, err, "go list -tags %q", tags)
		checked := 0
		for line := range strings.Lines(string(out)) {
			fields := strings.Fields(line)
			if len(fields) == 0 || !strings.HasPrefix(fields[0], "github.com/backfillsvc/backfill") || testOnly(fields[0]) {
				continue
			}
			checked++
			for _, imp := range fields[1:] {
				require.False(t, strings.HasPrefix(imp, testkitPath),
					"%s imports the test kit (%s) in production code (tags %q)", fields[0], imp, tags)
			}
		}
		require.Greater(t, checked, 10, "go list named too few of the module's packages to check")
	}
}

func testOnly(pkg string) bool {
	for _, tree := range testOnlyTrees {
		if pkg == strings.TrimSuffix(tree, "/") || strings.HasPrefix(pkg, strings.TrimSuffix(tree, "/")+"/") {
			return true
		}
	}
	return false
}
