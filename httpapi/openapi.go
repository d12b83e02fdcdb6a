package httpapi

import (
	_ "embed"
	"net/http"
)

// openapiYAML is the OpenAPI 3.1 description of this API (openapi.yaml; a
// copy is docs/openapi.yaml). The package's tests hold it to the server: every
// route and error code is in it, and every response of their calls
// validates against it.
//
//go:embed openapi.yaml
var openapiYAML []byte

// openapi serves the description, public like the dashboard's page: a
// client generator needs no token to read the contract.
func (s *Server) openapi(w http.ResponseWriter, r *http.Request) {
	writeEmbedded(w, "application/yaml", openapiYAML)
}
