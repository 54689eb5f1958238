#!/usr/bin/env bash
# A Moat cluster on one machine, for tests (docs/cluster.md): a private
# PostgreSQL (Debian's, initdb in DIR, a unix socket, run as nobody), a
# bridge mclbr0 (10.98.0.1/24) and four network namespaces on it as if
# four hosts: an API server alone (10.98.0.11, server scope 2), which holds
# the cluster CA, and three nodes, each joined with a token and the CA
# pinned: node-a (10.98.0.12, scope 3), node-b (10.98.0.13, scope 4) and
# node-c (10.98.0.14, scope 5). The templates the SDK suites use are
# registered in the shared store from the CI template cache.
#
#   scripts/cluster.sh up DIR DATA_DIR   start it; DIR/env gets
#                                        MOAT_E2E_API_URL and MOAT_E2E_API_KEY
#   scripts/cluster.sh down DIR          stop it, check that sandboxes ran
#                                        on every node and nothing is left
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
cmd=${1:?usage: scripts/cluster.sh up DIR DATA_DIR | down DIR}
dir=${2:?usage: scripts/cluster.sh up DIR DATA_DIR | down DIR}
pgbin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
dsn="postgres://postgres@/moat?host=$dir/pg"
names=(front node-a node-b node-c)
roles=(api node node node)
scopes=(2 3 4 5)

up() {
  local data=${1:?DATA_DIR}
  [ -x "$pgbin/postgres" ] || { echo "cluster: PostgreSQL is missing (Debian package postgresql-15)" >&2; exit 1; }
  local i
  for i in 0 1 2 3; do ip netns del "mcl$i" 2>/dev/null || true; done # what a killed run left
  ip link del mclbr0 2>/dev/null || true
  mkdir -p "$dir/pg" && chmod 711 "$dir" && chown nobody "$dir/pg"
  # PostgreSQL runs as nobody and the sandboxes' root is a mapped user:
  # both must reach DIR through its parents.
  if ! runuser -u nobody -- test -x "$dir/pg"; then
    echo "cluster: user nobody cannot reach $dir: give its parent directories o+x (chmod 711)" >&2
    exit 1
  fi
  runuser -u nobody -- "$pgbin/initdb" -D "$dir/pg/data" -A trust -U postgres >/dev/null
  runuser -u nobody -- "$pgbin/pg_ctl" -D "$dir/pg/data" -w -l "$dir/pg/log" \
    -o "-k $dir/pg -c listen_addresses='' -c fsync=off" start >/dev/null
  "$pgbin/createdb" -h "$dir/pg" -U postgres moat
  for t in base code-interpreter-v1; do
    MOAT_STORE=$dsn bin/moat template build "$t" --data-dir "$data" >"$dir/template-$t.log" 2>&1
  done
  ip link add mclbr0 type bridge
  ip addr add 10.98.0.1/24 dev mclbr0
  ip link set mclbr0 up
  for i in 0 1 2 3; do
    local ns=mcl$i addr=10.98.0.1$((i + 1))
    ip netns add "$ns"
    ip link add "mclv$i" type veth peer name eth0 netns "$ns"
    ip link set "mclv$i" master mclbr0 up
    ip -n "$ns" addr add "$addr/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
    ip -n "$ns" route add default via 10.98.0.1
    mkdir -p "$dir/${names[$i]}" && chmod 711 "$dir/${names[$i]}"
  done
  start 0 # the API server: it holds the cluster CA and joins the nodes
  local key tok pin
  key=$(grep -oE 'e2b_[0-9a-f]{40}' "$dir/front.log" | head -n 1)
  for i in 1 2 3; do
    tok=$(bin/moat cluster token --store "$dsn" --data-dir "$dir/front" 2>"$dir/token-hint")
    pin=$(sed -E 's/.*--ca-sha256 ([0-9a-f]+).*/\1/' "$dir/token-hint")
    bin/moat cluster join --api http://10.98.0.11:3000 --token "$tok" --ca-sha256 "$pin" \
      --node-id "${names[$i]}" --dir "$dir/${names[$i]}/cluster-node" >/dev/null
    start "$i"
  done
  printf 'export MOAT_E2E_API_URL=http://10.98.0.11:3000\nexport MOAT_E2E_API_KEY=%s\n' "$key" >"$dir/env"
  bin/moat cluster nodes --store "$dsn" >&2
}

# start I: server I in its namespace, until it listens.
start() {
  local i=$1 addr=10.98.0.1$(($1 + 1))
  nsenter --net="/run/netns/mcl$i" bin/moat serve --data-dir "$dir/${names[$i]}" --store "$dsn" \
    --node-id "${names[$i]}" --role "${roles[$i]}" --node-addr "$addr:3443" --addr "$addr:3000" \
    --scope "${scopes[$i]}" --runtime container >"$dir/${names[$i]}.log" 2>&1 &
  echo $! >"$dir/${names[$i]}.pid"
  local n
  for n in $(seq 300); do
    grep -q 'moat listening on' "$dir/${names[$i]}.log" && return 0
    kill -0 "$(cat "$dir/${names[$i]}.pid")" 2>/dev/null || break
    sleep 0.1
  done
  echo "cluster: ${names[$i]} did not start:" >&2
  tail -n 20 "$dir/${names[$i]}.log" >&2
  exit 1
}

down() {
  local rc=0 i pid n counts=
  for i in 0 1 2 3; do
    n=$(grep -c 'sandbox created' "$dir/${names[$i]}.log" 2>/dev/null || true)
    counts+=" ${names[$i]} ${n:-0}"
    if [ "$i" -gt 0 ] && [ "${n:-0}" = 0 ]; then
      echo "cluster: ${names[$i]} ran no sandbox: the creates were not spread over every node" >&2
      rc=1
    fi
    if [ "$i" = 0 ] && [ "${n:-0}" != 0 ]; then
      echo "cluster: the API server ran sandboxes" >&2
      rc=1
    fi
  done
  echo "cluster: sandboxes created:$counts" >&2
  for i in 3 2 1 0; do
    pid=$(cat "$dir/${names[$i]}.pid" 2>/dev/null) || continue
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  done
  local left
  left=$({ ip netns list | grep -E '^moats[2345]-' || true; grep -E "$dir/" /proc/self/mountinfo || true; })
  if [ -n "$left" ]; then
    printf 'cluster: left on the host:\n%s\n' "$left" >&2
    rc=1
  fi
  for i in 0 1 2 3; do
    ip netns del "mcl$i" 2>/dev/null || true
  done
  ip link del mclbr0 2>/dev/null || true
  [ -x "$pgbin/pg_ctl" ] && runuser -u nobody -- "$pgbin/pg_ctl" -D "$dir/pg/data" -m fast stop >/dev/null 2>&1 || true
  return "$rc"
}

case $cmd in
up) up "${3:-}" ;;
down) down ;;
*) echo "usage: scripts/cluster.sh up DIR DATA_DIR | down DIR" >&2; exit 2 ;;
esac
