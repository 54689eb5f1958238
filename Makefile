# Moat build entry points. `make build` writes bin/moat and bin/envd (static,
# it runs inside every sandbox); `moat template build` finds bin/envd beside
# bin/moat.

GO ?= go

.PHONY: all build moat envd proto test clean

all: build

build: envd moat

envd:
	CGO_ENABLED=0 $(GO) build -trimpath -o bin/envd ./cmd/envd

moat:
	$(GO) build -trimpath -o bin/moat ./cmd/moat

proto:
	$(GO) generate ./api/...

test:
	./scripts/test.sh

clean:
	rm -rf bin
