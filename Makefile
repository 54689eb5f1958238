# Moat build entry points. `make build` writes bin/moat, bin/envd (static,
# it runs inside every sandbox), bin/moat-vminit (static, the microVM
# guest's init) and bin/moat-nfsd (static, the jailed NFS server of a
# microVM's volumes); moat finds them beside its own binary.

GO ?= go

.PHONY: all build moat envd vminit nfsd proto test clean

all: build

build: envd moat vminit nfsd

envd:
	CGO_ENABLED=0 $(GO) build -trimpath -o bin/envd ./cmd/envd

vminit:
	CGO_ENABLED=0 $(GO) build -trimpath -o bin/moat-vminit ./cmd/moat-vminit

nfsd:
	CGO_ENABLED=0 $(GO) build -trimpath -o bin/moat-nfsd ./cmd/moat-nfsd

moat:
	$(GO) build -trimpath -o bin/moat ./cmd/moat

proto:
	$(GO) generate ./api/...

test:
	./scripts/test.sh

clean:
	rm -rf bin
