package api_test

import (
	"context"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/backfillsvc/backfill/api"
	"github.com/backfillsvc/backfill/domain"
)

func loadSpec(t *testing.T) *openapi3.T {
	t.Helper()
	doc, err := openapi3.NewLoader().LoadFromData(api.SpecYAML)
	if err != nil {
		t.Fatalf("load openapi.yaml: %v", err)
	}
	return doc
}

// Validate also checks every example and default against its schema.
func TestSpecIsValidOpenAPI(t *testing.T) {
	doc := loadSpec(t)
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("openapi.yaml is invalid: %v", err)
	}
	if doc.OpenAPI != "3.0.3" {
		t.Fatalf("openapi version = %q, want 3.0.3", doc.OpenAPI)
	}
}

// The contract's status-code conventions hold on every /api/v1 operation, so a
// client generated from the spec knows every answer it can get.
func TestEveryAPIOperationDocumentsTheCommonErrors(t *testing.T) {
	doc := loadSpec(t)
	for path, item := range doc.Paths.Map() {
		if !strings.HasPrefix(path, "/api/v1/") {
			continue
		}
		for method, op := range item.Operations() {
			want := []string{"400", "401", "500", "503"}
			if op.RequestBody != nil {
				want = append(want, "413")
			}
			for _, status := range want {
				if op.Responses.Value(status) == nil {
					t.Errorf("%s %s (%s) does not document %s", method, path, op.OperationID, status)
				}
			}
		}
	}
}

// Request bodies reject unknown fields (400 invalid_request), so every
// request schema must say so.
func TestRequestBodiesRejectUnknownFields(t *testing.T) {
	doc := loadSpec(t)
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			if op.RequestBody == nil {
				continue
			}
			for ct, media := range op.RequestBody.Value.Content {
				s := media.Schema.Value
				if s.AdditionalProperties.Has == nil || *s.AdditionalProperties.Has {
					t.Errorf("%s %s: %s body schema allows additional properties", method, path, ct)
				}
			}
		}
	}
}

// The event types the service writes are the spec's, in its order, for events and for
// webhooks' filters alike.
func TestEventTypesAreTheSpecs(t *testing.T) {
	doc := loadSpec(t)
	for _, name := range []string{"EventType", "WebhookEventType"} {
		var spec []string
		for _, v := range doc.Components.Schemas[name].Value.Enum {
			spec = append(spec, v.(string))
		}
		var ours []string
		for _, t := range domain.EventTypes {
			ours = append(ours, string(t))
		}
		if strings.Join(spec, ",") != strings.Join(ours, ",") {
			t.Fatalf("%s lists %v, domain.EventTypes %v", name, spec, ours)
		}
	}
}
