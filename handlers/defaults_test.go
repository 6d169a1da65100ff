package handlers

import (
	"testing"

	"github.com/backfillsvc/backfill/api"
	"github.com/backfillsvc/backfill/domain"
	"github.com/getkin/kin-openapi/openapi3"
	"github.com/stretchr/testify/require"
)

// The handlers' defaults are the spec's; a spec that stops declaring one fails the start rather
// than leaving a zero (a claim of 0 runs, a lease of 0 seconds) in its place.
func TestDefaultsComeFromTheSpecAndAreRequired(t *testing.T) {
	load := func() *openapi3.T {
		doc, err := openapi3.NewLoader().LoadFromData(api.SpecYAML)
		require.NoError(t, err)
		return doc
	}
	d, err := loadDefaults(load())
	require.NoError(t, err)
	require.Equal(t, 300, d.leaseSeconds)
	require.Equal(t, domain.ReprocessNone, d.reprocessBehavior)

	doc := load()
	doc.Components.Schemas["ClaimRequest"].Value.Properties["lease_seconds"].Value.Default = nil
	_, err = loadDefaults(doc)
	require.ErrorContains(t, err, "ClaimRequest.lease_seconds declares no default")

	doc = load()
	doc.Components.Parameters["Limit"].Value.Schema.Value.Default = "fifty"
	_, err = loadDefaults(doc)
	require.ErrorContains(t, err, "parameter Limit: default fifty is not an integer")
}
