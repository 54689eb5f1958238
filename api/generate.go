// Package api holds Moat's wire contracts: the envd protobuf services (E2B's
// process and filesystem packages, byte-compatible) and the code generated
// from them. Regenerate with `go generate ./api/...` (needs protoc from
// Debian's protobuf-compiler; the Go plugins are run through `go run`).
package api

//go:generate ./generate.sh
