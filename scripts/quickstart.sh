#!/usr/bin/env bash
# The README's first command: prepare the host, start `moat serve`, create an
# API key and run Python code in a sandbox, then stop the server.
#
# Environment:
#   MOAT_DATA_DIR  data dir (default /var/lib/moat)
#   MOAT_ADDR      listen address (default 127.0.0.1:3000)
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
export MOAT_DATA_DIR="${MOAT_DATA_DIR:-/var/lib/moat}"
MOAT_ADDR="${MOAT_ADDR:-127.0.0.1:3000}"

scripts/setup.sh

log_file="$(mktemp -t moat-quickstart.XXXXXX.log)"
server_pid=""
cleanup() {
  if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
    kill -TERM "$server_pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.2; done
    kill -KILL "$server_pid" 2>/dev/null || true
  fi
}
trap cleanup EXIT INT TERM

echo "==> moat serve --addr $MOAT_ADDR --data-dir $MOAT_DATA_DIR (log: $log_file)" >&2
bin/moat serve --addr "$MOAT_ADDR" --data-dir "$MOAT_DATA_DIR" >"$log_file" 2>&1 &
server_pid=$!
for _ in $(seq 1 300); do
  grep -q 'moat listening on' "$log_file" && break
  kill -0 "$server_pid" 2>/dev/null || { cat "$log_file" >&2; echo "moat serve exited" >&2; exit 1; }
  sleep 0.2
done
curl -fsS -m 5 "http://$MOAT_ADDR/health" >/dev/null || { cat "$log_file" >&2; echo "moat serve is not healthy" >&2; exit 1; }

api_key="$(bin/moat apikey create --data-dir "$MOAT_DATA_DIR" | tail -n 1)"
export E2B_API_URL="http://$MOAT_ADDR" E2B_SANDBOX_URL="http://$MOAT_ADDR" E2B_API_KEY="$api_key"
export MOAT_API_URL="$E2B_API_URL" MOAT_API_KEY="$api_key"

echo "==> bin/moat run -- python3 -c 'print(sum(range(10)))'" >&2
out="$(bin/moat run -- python3 -c 'print(sum(range(10)))')"
echo "$out"
[ "$(echo "$out" | tail -n 1 | tr -d '[:space:]')" = 45 ] || { cat "$log_file" >&2; echo "expected 45" >&2; exit 1; }
rm -f "$log_file"

cat >&2 <<MSG

Moat works. To use it from the E2B SDKs, start the server and point them at it:

  bin/moat serve --addr $MOAT_ADDR --data-dir $MOAT_DATA_DIR &
  export E2B_API_URL=http://$MOAT_ADDR E2B_SANDBOX_URL=http://$MOAT_ADDR
  export E2B_API_KEY=\$(bin/moat apikey create --data-dir $MOAT_DATA_DIR | tail -n 1)
MSG
