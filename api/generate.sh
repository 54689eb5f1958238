#!/usr/bin/env bash
# Regenerates the Go code beside the .proto files. Run through `go generate ./api/...`.
set -euo pipefail
cd "$(dirname "$0")"
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
GOBIN="$bin" go install google.golang.org/protobuf/cmd/protoc-gen-go connectrpc.com/connect/cmd/protoc-gen-connect-go
for p in envd/process/process.proto envd/filesystem/filesystem.proto; do
  PATH="$bin:$PATH" protoc -I . -I /usr/include \
    --go_out=. --go_opt=paths=source_relative \
    --connect-go_out=. --connect-go_opt=paths=source_relative "$p"
done
