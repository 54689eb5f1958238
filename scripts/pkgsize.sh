#!/usr/bin/env bash
# Package size check (issue 14: no package grows past ~1.5k lines).
#
# Prints the non-test, non-generated .go lines of every Go package of the
# module (largest first) and fails when one is over the limit (1500). The
# packages not yet split are listed in `ceiling` with their size when the
# check was added: over the limit they only warn, but they fail if they
# grow past that size. Split one, then delete its line here.
#
#   scripts/pkgsize.sh          # the table, then OK / FAIL
#   PKGSIZE_QUIET=1 scripts/pkgsize.sh   # only warnings and failures
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

limit=1500
declare -A ceiling=(
)

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

fail=0
table=$(
  find . -name '*.go' -not -path './test/e2e/node_modules/*' -not -path './.git/*' -printf '%h\n' |
    sed 's|^\./||' | sort -u | while read -r d; do
      n=$(lines "$d")
      if [ "$n" -gt 0 ]; then printf '%6d %s\n' "$n" "$d"; fi
    done | sort -rn
)
[ "${PKGSIZE_QUIET:-0}" = 1 ] || echo "$table"
while read -r n d; do
  c=${ceiling[$d]:-}
  if [ -n "$c" ]; then
    if [ "$n" -gt "$c" ]; then
      echo "FAIL: $d has $n lines, more than its ceiling $c (not yet split; it must not grow)" >&2
      fail=1
    elif [ "$n" -gt "$limit" ]; then
      echo "WARN: $d has $n lines (> $limit); not yet split, ceiling $c" >&2
    fi
  elif [ "$n" -gt "$limit" ]; then
    echo "FAIL: $d has $n lines, more than $limit: split it into packages with one job each" >&2
    fail=1
  fi
done <<<"$table"
if [ "$fail" = 0 ]; then echo "package sizes OK (limit $limit non-test lines)" >&2; fi
exit "$fail"
