// Package api holds Moat's wire contracts and the code generated from them:
// the envd protobuf services (E2B's process and filesystem packages,
// byte-compatible) and E2B's REST API (rest/openapi.yml, with Moat's
// additions marked; Go types in package rest). Regenerate everything with
// `go generate ./api/...` (needs protoc and the well-known .proto files from
// Debian's protobuf-compiler and libprotobuf-dev; the Go plugins and
// oapi-codegen are run through `go run` at pinned versions). scripts/test.sh
// fails when that changes anything under api/.
package api

//go:generate ./generate.sh
