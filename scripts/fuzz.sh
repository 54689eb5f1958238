#!/usr/bin/env bash
# Runs every Go fuzz target of the module for a bounded time each (the full
# test tier: scripts/test.sh --full); the seeds alone run in every
# `go test`. FUZZTIME (default 10s) is each target's budget, NFS_FUZZTIME
# (default 60s) that of the NFS server's RPC decoder (internal/nfsd
# FuzzCall), whose input comes from guests.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
fuzztime=${FUZZTIME:-10s}
rc=0
while IFS=: read -r file _ decl; do
  name=$(sed -E 's/^func (Fuzz[A-Za-z0-9_]*)\(.*/\1/' <<<"$decl")
  pkg="./$(dirname "$file")"
  t=$fuzztime
  [ "$name" = FuzzCall ] && [ "$pkg" = ./internal/nfsd ] && t=${NFS_FUZZTIME:-60s}
  echo "fuzz: $pkg $name ($t)" >&2
  if ! go test "$pkg" -run '^$' -fuzz "^$name\$" -fuzztime "$t" >/tmp/fuzz.$$.log 2>&1; then
    cat /tmp/fuzz.$$.log >&2
    echo "fuzz: $pkg $name FAILED (the failing input is under $pkg/testdata/fuzz/$name)" >&2
    rc=1
  fi
done < <(grep -rn --include='*_test.go' -E '^func Fuzz[A-Za-z0-9_]*\(f \*testing\.F\)' internal cmd sdk | sort)
rm -f /tmp/fuzz.$$.log
exit "$rc"
