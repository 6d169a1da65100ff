package tests

import (
	"net/http"
	"strings"
	"testing"

	"github.com/backfillsvc/backfill/api"
	"github.com/getkin/kin-openapi/openapi3"
	"github.com/stretchr/testify/require"
)

// An id in a path is one integer written one way: `+1`, `01`, ` 1` and `1e0` name no backfill,
// run or webhook, on every route of the spec that takes an integer id, and are 400
// invalid_request naming the parameter, as any other id that is not an integer is.
func TestNonCanonicalPathIdsAre400OnEveryRoute(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.PutDag("ids", "@daily", "UTC")
	b := e.DailyBackfill("ids", day(1, 1), day(1, 2))
	require.EqualValues(t, 1, b.Id)

	doc, err := openapi3.NewLoader().LoadFromData(api.SpecYAML)
	require.NoError(t, err)
	checked := 0
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			var ids []string
			for _, ref := range append(item.Parameters, op.Parameters...) {
				p := ref.Value
				if p.In == openapi3.ParameterInPath && p.Schema.Value.Type.Is(openapi3.TypeInteger) {
					ids = append(ids, p.Name)
				}
			}
			if len(ids) == 0 {
				continue
			}
			for _, bad := range []string{"+1", "01", "%201", "1e0", "1.0"} {
				url := strings.ReplaceAll(path, "{dag_id}", "ids")
				for _, name := range ids {
					url = strings.ReplaceAll(url, "{"+name+"}", bad)
				}
				res := e.Do(method, url, nil)
				p := requireProblem(t, res, http.StatusBadRequest, "invalid_request", method, " ", url)
				require.Equal(t, ids[0], (*p.Errors)[0].Field, "%s %s: %s", method, url, res.Body)
				checked++
			}
		}
	}
	require.GreaterOrEqual(t, checked, 5*12, "the routes with integer ids were found")
}
