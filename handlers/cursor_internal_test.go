package handlers

import (
	"strings"
	"testing"

	"github.com/backfillsvc/backfill/api"
	"github.com/getkin/kin-openapi/openapi3"
	"github.com/stretchr/testify/require"
)

// isDagIDKey restates the spec's DagId schema by hand (a cursor's key is checked without a
// schema walk): it must agree with the schema, which changed once already (. and ..).
func TestDagIDKeyAgreesWithTheSpec(t *testing.T) {
	t.Parallel()
	doc, err := openapi3.NewLoader().LoadFromData(api.SpecYAML)
	require.NoError(t, err)
	schema := doc.Components.Schemas["DagId"].Value
	for _, k := range []string{
		"a", "sales_daily", "a.b-c_9", ".", "..", "...", ".a", "..a", "a.", "-", "_",
		"a b", "a/b", "a\x00", "é", "", strings.Repeat("a", 250), strings.Repeat("a", 251),
		"." + strings.Repeat("a", 249), ".." + strings.Repeat("a", 248),
	} {
		require.Equal(t, schema.VisitJSON(k) == nil, isDagIDKey(k), "%q", k)
	}
}
