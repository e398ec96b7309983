// Package turnpike holds what the whole module shares at its root: the
// OpenAPI description of the gateway's HTTP API.
package turnpike

import _ "embed"

// Spec is openapi.yaml, the OpenAPI 3.1 description of every route the
// gateway serves; the gateway serves it at /openapi.yaml.
//
//go:embed openapi.yaml
var Spec []byte
