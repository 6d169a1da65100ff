package exported

import (
	"fmt"
	"strings"

	"github.com/prometheus/prometheus/promql/parser"
)

// grafanaVariables are replaced before parsing: PromQL has no such syntax.
var grafanaVariables = strings.NewReplacer(
	"$__rate_interval", "5m",
	"$__interval", "1m",
	"$__range", "1h",
	"$job", "backfill",
)

// MetricsIn parses a PromQL expression (Grafana's variables allowed) and returns every
// metric name its selectors name.
func MetricsIn(expr string) ([]string, error) {
	e, err := parser.NewParser(parser.Options{}).ParseExpr(grafanaVariables.Replace(expr))
	if err != nil {
		return nil, fmt.Errorf("%q: %w", expr, err)
	}
	var names []string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			names = append(names, vs.Name)
		}
		return nil
	})
	if len(names) == 0 {
		return nil, fmt.Errorf("%q names no metric", expr)
	}
	return names, nil
}
