package tests

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/api"
	"github.com/getkin/kin-openapi/openapi3"
	"github.com/stretchr/testify/require"
)

// specDefault reads one default from api/openapi.yaml: a component schema's property
// ("BackfillCreate.max_active_runs") or a component parameter ("#Limit").
func specDefault(t *testing.T, doc *openapi3.T, schema, prop string) any {
	t.Helper()
	var s *openapi3.SchemaRef
	if schema == "#" {
		p := doc.Components.Parameters[prop]
		require.NotNil(t, p, "parameter %s", prop)
		s = p.Value.Schema
	} else {
		c := doc.Components.Schemas[schema]
		require.NotNil(t, c, "schema %s", schema)
		s = c.Value.Properties[prop]
		require.NotNil(t, s, "property %s.%s", schema, prop)
	}
	require.NotNil(t, s.Value.Default, "%s.%s declares no default", schema, prop)
	return s.Value.Default
}

func specInt(t *testing.T, doc *openapi3.T, schema, prop string) int {
	t.Helper()
	v, ok := specDefault(t, doc, schema, prop).(float64)
	require.True(t, ok, "%s.%s: not a number", schema, prop)
	return int(v)
}

// TestHandlersApplyTheSpecsDefaults leaves every optional field out and checks that what the
// service did is what api/openapi.yaml says it does: the spec is the one source of these
// defaults, and a handler that repeats (and drifts from) one fails here.
func TestHandlersApplyTheSpecsDefaults(t *testing.T) {
	t.Parallel()
	doc, err := openapi3.NewLoader().LoadFromData(api.SpecYAML)
	require.NoError(t, err)
	e := newEnv(t)

	// DagPut: timezone, max_active_runs, is_paused.
	dag := e.PutDag("defaults", "@daily", "")
	require.Equal(t, specDefault(t, doc, "DagPut", "timezone"), dag.Timezone)
	require.Equal(t, specInt(t, doc, "DagPut", "max_active_runs"), int(dag.MaxActiveRuns))
	require.Equal(t, specDefault(t, doc, "DagPut", "is_paused"), dag.IsPaused)

	// BackfillCreate: max_active_runs, run_backwards, reprocess_behavior (through its $ref).
	b := e.CreateBackfill(backfillBody("defaults", day(1, 1), day(1, 5)))
	require.Equal(t, specInt(t, doc, "BackfillCreate", "max_active_runs"), int(b.MaxActiveRuns))
	require.Equal(t, specDefault(t, doc, "BackfillCreate", "run_backwards"), b.RunBackwards)
	require.Equal(t, specDefault(t, doc, "BackfillCreate", "reprocess_behavior"), string(b.ReprocessBehavior))
	require.Nil(t, b.DagRunConf)

	// ClaimRequest: limit and lease_seconds. Five runs are queued; the claim takes the
	// default number and leases them for the default time from the database's clock.
	claimLimit := specInt(t, doc, "ClaimRequest", "limit")
	lease := specInt(t, doc, "ClaimRequest", "lease_seconds")
	require.Less(t, claimLimit, 5, "the test queues more runs than a default claim takes")
	res := e.Do(http.MethodPost, "/api/v1/runs/claim", map[string]any{"worker_id": "w"})
	require.Equal(t, http.StatusOK, res.Status, "body: %s", res.Body)
	var claimed api.ClaimResponse
	res.Decode(t, &claimed)
	require.Len(t, claimed.Runs, claimLimit)
	for _, r := range claimed.Runs {
		require.NotNil(t, r.LeaseExpiresAt)
		require.Equal(t, e.Clock.Now().Add(time.Duration(lease)*time.Second), r.LeaseExpiresAt.UTC())
	}

	// limit and offset of every list: one more DAG than a default page holds.
	limit := specInt(t, doc, "#", "Limit")
	require.Zero(t, specInt(t, doc, "#", "Offset"))
	for i := range limit {
		e.PutDag(fmt.Sprintf("page_%04d", i), "@daily", "")
	}
	res = e.Do(http.MethodGet, "/api/v1/dags", nil)
	var dags api.DagCollection
	res.Decode(t, &dags)
	require.EqualValues(t, limit+1, dags.TotalEntries)
	require.Len(t, dags.Dags, limit)
	require.Equal(t, "defaults", dags.Dags[0].DagId, "offset 0 starts at the first DAG")

	// order_by of the backfill list: a second backfill, and the spec's default order.
	b2 := e.CreateBackfill(backfillBody("page_0000", day(1, 1), day(1, 1)))
	res = e.Do(http.MethodGet, "/api/v1/backfills", nil)
	var list api.BackfillCollection
	res.Decode(t, &list)
	require.Len(t, list.Backfills, 2)
	order := listOrderDefault(t, doc, "listBackfills")
	require.Contains(t, []string{"id", "-id"}, order)
	first := b.Id
	if order == "-id" {
		first = b2.Id
	}
	require.Equal(t, first, list.Backfills[0].Id, "order_by defaults to %s", order)
}

// listOrderDefault is the default of an operation's order_by query parameter.
func listOrderDefault(t *testing.T, doc *openapi3.T, opID string) string {
	t.Helper()
	for _, item := range doc.Paths.Map() {
		for _, op := range item.Operations() {
			if op.OperationID == opID {
				p := op.Parameters.GetByInAndName("query", "order_by")
				require.NotNil(t, p)
				return p.Schema.Value.Default.(string)
			}
		}
	}
	t.Fatalf("no operation %s", opID)
	return ""
}
