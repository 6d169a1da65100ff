// Package api holds the service's OpenAPI contract and the Go server interface and models
// generated from it.
package api

import _ "embed"

//go:generate go tool oapi-codegen -config oapi-codegen.yaml openapi.yaml

// SpecYAML is the OpenAPI contract (openapi.yaml). It is served at GET /openapi.yaml and
// used by the request validator.
//
//go:embed openapi.yaml
var SpecYAML []byte
