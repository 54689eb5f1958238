// Package rest holds the Go types of E2B's REST API, generated from
// openapi.yml (E2B's contract with Moat's additions marked) by oapi-codegen.
// Regenerate with `go generate ./api/...`; never edit rest.gen.go.
package rest

//go:generate go run github.com/oapi-codegen/oapi-codegen/v2/cmd/oapi-codegen@v2.8.2 -config config.yaml openapi.yml
