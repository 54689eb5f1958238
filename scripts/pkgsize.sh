#!/usr/bin/env bash
# Package size report: the non-test, non-generated .go lines of every Go
# package of the module, largest first, and a warning for each package over
# 1500 lines. A warning, not a failure: split a package when it holds more
# than one concept (STYLE.md), not to stay under a number.
#
#   scripts/pkgsize.sh                   # the table, then the warnings
#   PKGSIZE_QUIET=1 scripts/pkgsize.sh   # only the warnings
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

limit=1500

# lines DIR: non-test .go lines in DIR, files marked generated left out
# (https://go.dev/s/generatedcode).
lines() {
  local n=0 f
  for f in "$1"/*.go; do
    case $f in *_test.go) continue ;; esac
    if grep -qE '^// Code generated .* DO NOT EDIT\.$' "$f"; then continue; fi
    n=$((n + $(wc -l <"$f")))
  done
  echo "$n"
}

table=$(
  find . -name '*.go' -not -path './test/e2e/node_modules/*' -not -path './.git/*' -printf '%h\n' |
    sed 's|^\./||' | sort -u | while read -r d; do
      n=$(lines "$d")
      if [ "$n" -gt 0 ]; then printf '%6d %s\n' "$n" "$d"; fi
    done | sort -rn
)
[ "${PKGSIZE_QUIET:-0}" = 1 ] || echo "$table"
while read -r n d; do
  if [ "$n" -gt "$limit" ]; then
    echo "WARN: $d has $n non-test lines (> $limit): does it hold more than one concept?" >&2
  fi
done <<<"$table"
