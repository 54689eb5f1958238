# Moat build entry points. `make build` writes bin/moat, bin/envd (static,
# it runs inside every sandbox) and bin/moat-vminit (static, the microVM
# guest's init); moat finds both beside its own binary.

GO ?= go

.PHONY: all build moat envd vminit proto test clean

all: build

build: envd moat vminit

envd:
	CGO_ENABLED=0 $(GO) build -trimpath -o bin/envd ./cmd/envd

vminit:
	CGO_ENABLED=0 $(GO) build -trimpath -o bin/moat-vminit ./cmd/moat-vminit

moat:
	$(GO) build -trimpath -o bin/moat ./cmd/moat

proto:
	$(GO) generate ./api/...

test:
	./scripts/test.sh

clean:
	rm -rf bin
