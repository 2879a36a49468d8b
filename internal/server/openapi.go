package server

import (
	_ "embed"
	"net/http"
)

// openAPI is the operator API's OpenAPI 3.1 document. TestOpenAPIMatchesTheRoutes
// checks it against the route table and the handlers' answers.
//
//go:embed openapi.json
var openAPI []byte

func handleOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	_, _ = w.Write(openAPI)
}
