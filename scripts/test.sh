#!/usr/bin/env bash
# The README's second command: the test suite. docs/development.md says what
# each tier runs, how long it takes and how to run one suite or one test.
#
#   scripts/test.sh          the default tier (what .ci/run runs): thorough,
#                            within 30 minutes from an empty template cache
#   scripts/test.sh --full   everything: the default tier plus the
#                            benchmarks' medians and ratios, the big runs
#                            (density 200 + 50, a 1000-create burst) and the
#                            runtime suites' reruns that only repeat the API
#
# Every phase prints tests run / passed / failed / skipped and each skip's
# reason (test/report). MOAT_TEST_REQUIRE=1 is set for everything it runs:
# a test that cannot run its real components fails, and a skip that is not
# listed in test/skips.txt (skips by design, with reasons) fails its phase.
#
# Environment:
#   MOAT_CI_DATA_DIR    test data dir (default /var/lib/moat-ci); the template
#                       cache is its templates/ (and vm/ for microVM images)
#   MOAT_E2E_RUNTIMES   runtimes whose e2e suites run (default "container vm gvisor")
#   MOAT_E2E_SUITES     only these suite names (e.g. "files pty"), on every runtime
#   MOAT_E2E_LANES=1    run the e2e suites in one lane (default 2: microVMs beside
#                       containers and gVisor, the latter in server scope 1)
#   MOAT_TEST_SKIP_GO=1 skip the static checks and go test
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
repo="$(pwd)"
tier=default
case "${1:-}" in
--full) tier=full ;;
"") ;;
*) echo "usage: scripts/test.sh [--full]" >&2; exit 2 ;;
esac
# Go may be installed where sudo's secure_path does not look.
command -v go >/dev/null || { [ -x /usr/local/go/bin/go ] && PATH="$PATH:/usr/local/go/bin"; }

export MOAT_TEST_REQUIRE=1
[ "$tier" = full ] && export MOAT_TEST_FULL=1
export MOAT_DATA_DIR="${MOAT_CI_DATA_DIR:-/var/lib/moat-ci}"
export MOAT_E2E_DATA_DIR="$MOAT_DATA_DIR"
export MOAT_BIN="$repo/bin/moat"
# Every e2e server's full log lands here; the tail is printed when a suite fails.
export MOAT_E2E_LOG_DIR="${MOAT_E2E_LOG_DIR:-$(mktemp -d /tmp/moat-e2e-logs.XXXXXX)}"
work="$(mktemp -d /tmp/moat-test.XXXXXX)"
export MOAT_TEST_SUMMARY="$work/summary.tsv"
report="$work/report"

# log prints a phase heading with the time since the start; the phases'
# durations are listed again at the end (a slow host shows where it lost).
phase_names=() phase_starts=()
log() {
  local msg="$*"
  printf '==> [%dm%02ds] %s\n' $((SECONDS / 60)) $((SECONDS % 60)) "$msg" >&2
  phase_names+=("${msg:0:90}") phase_starts+=("$SECONDS")
}
phase_times() {
  local i end
  printf '==> phase durations (%s tier, total %dm%02ds):\n' "$tier" $((SECONDS / 60)) $((SECONDS % 60)) >&2
  for i in "${!phase_names[@]}"; do
    end=${phase_starts[$((i + 1))]:-$SECONDS}
    printf '%6ds  %s\n' $((end - phase_starts[i])) "${phase_names[$i]}" >&2
  done
}

# Anything this script (or the suites it runs) leaves running is stopped on
# exit: the suites stop their own servers; this catches survivors that use
# our data dir.
cleanup() {
  local rc=$?
  for pid in $(pgrep -f "^$repo/bin/moat serve .*--data-dir $MOAT_DATA_DIR(-s1)? " 2>/dev/null || true); do
    kill -TERM "$pid" 2>/dev/null || true
    sleep 2
    kill -KILL "$pid" 2>/dev/null || true
  done
  rm -rf "$work"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# retry runs a command that fetches from the Go module proxy up to three
# times, 15 s apart: the proxy has been unreachable for a minute at a time,
# and a run should not fail on that alone.
retry() {
  local i
  for i in 1 2 3; do
    "$@" && return 0
    [ "$i" = 3 ] || { echo "retry: attempt $i of \`$*\` failed; again in 15 s" >&2; sleep 15; }
  done
  return 1
}

failed=()
die() {
  log "FAILED: $*"
  exit 1
}

# A run that was killed leaves its sandboxes behind (docs/development.md):
# they go first, so that this run's leak check counts only its own (with
# --host also what a killed `go test` left, unless a moat serve runs).
scripts/sweep.sh --host "$MOAT_DATA_DIR"
df -h "$(dirname "$MOAT_DATA_DIR")" /tmp >&2 || true

log "setup (template cache: $MOAT_DATA_DIR/templates)"
MOAT_SETUP_TEMPLATES="base code-interpreter-v1" scripts/setup.sh || die "scripts/setup.sh (see its last lines above)"

# The components the tests run for real. A missing one stops the run here,
# named, instead of failing (or, before, skipping) tests one by one.
log "preflight: the real components the tests need"
missing=()
for tool in crun runc runsc qemu-system-x86_64 qemu-img mkfs.ext4 nft ip busybox mmdebstrap node npm python3 protoc sqlite3 flock tmux chromium; do
  # command -v also prints a file it cannot run (bash), so check it; the
  # runtimes must also run.
  if ! p=$(command -v "$tool"); then
    missing+=("$tool (not on PATH)")
  elif [ ! -f "$p" ] || [ ! -x "$p" ]; then
    missing+=("$tool ($p is not an executable file)")
  else
    case $tool in
    crun | runc | runsc) v=--version ;;
    qemu-system-x86_64) v=-version ;;
    *) continue ;;
    esac
    "$tool" "$v" >/dev/null 2>&1 || missing+=("$tool (does not run: $("$tool" "$v" 2>&1 | head -n 1 || true))")
  fi
done
for b in envd moat moat-vminit moat-nfsd; do
  [ -x "bin/$b" ] || missing+=("bin/$b (make build did not produce it)")
done
ls /boot/vmlinuz-* >/dev/null 2>&1 || missing+=("a kernel in /boot for microVMs (linux-image-cloud-amd64)")
/usr/bin/python3 -c 'import ipykernel' 2>/dev/null || missing+=("/usr/bin/python3 with ipykernel (python3-ipykernel)")
for t in base code-interpreter-v1; do
  [ -x "$MOAT_DATA_DIR/templates/$t/rootfs/usr/local/bin/envd" ] || missing+=("template $t in $MOAT_DATA_DIR/templates")
done
[ "${#missing[@]}" -eq 0 ] || die "missing real components: ${missing[*]}"
go build -o "$report" ./test/report || die "go build ./test/report"

# The npm SDKs first: some Go tests (internal/app) drive the real e2b SDK too.
log "npm ci (test/e2e)"
(cd test/e2e && npm ci --no-audit --no-fund) || die "npm ci in test/e2e"

if [ "${MOAT_TEST_SKIP_GO:-0}" != 1 ]; then
  # Generated code (protobuf and OpenAPI) must be what its sources generate.
  log "go generate ./api/... (generated files must be up to date)"
  if ! retry go generate ./api/...; then
    failed+=("go generate")
  elif ! git diff --exit-code -- api || [ -n "$(git status --porcelain -- api)" ]; then
    git status --short -- api >&2
    log "generated files under api/ differ from what \`go generate ./api/...\` writes: run it and commit the result"
    failed+=("generated files")
  fi
  log "package sizes (scripts/pkgsize.sh: warnings only)"
  PKGSIZE_QUIET=1 scripts/pkgsize.sh
  log "go vet ./..."
  go vet ./... || failed+=("go vet")
  # staticcheck, pinned, installed from the module proxy into a temporary
  # GOBIN so a clean clone needs nothing preinstalled.
  staticcheck_version=v0.8.2
  log "staticcheck ./... ($staticcheck_version)"
  if retry env GOBIN="$work" go install "honnef.co/go/tools/cmd/staticcheck@$staticcheck_version"; then
    "$work/staticcheck" ./... || failed+=("staticcheck")
  else
    failed+=("staticcheck (install)")
  fi
  # The client side builds for macOS: the CLI's client commands and the Go
  # SDK (server-only code is behind //go:build linux).
  log "client build for macOS: GOOS=darwin go build ./cmd/moat ./sdk/... (arm64; --full: amd64 too) and go vet"
  # amd64 in the full tier only: the same code, another code generator.
  darwin_arches=arm64
  [ "$tier" = full ] && darwin_arches="arm64 amd64"
  for arch in $darwin_arches; do
    GOOS=darwin GOARCH=$arch go build -o "$work/moat-darwin-$arch" ./cmd/moat &&
      GOOS=darwin GOARCH=$arch go build ./sdk/... || failed+=("darwin/$arch build")
  done
  GOOS=darwin GOARCH=arm64 go vet ./cmd/moat ./internal/cli/templatebuild ./sdk/... || failed+=("darwin vet")
  log "go test ./... (as root; MOAT_TEST_REQUIRE=1)"
  go test ./... -count=1 -json -timeout 30m 2>&1 | "$report" go go-test || failed+=("go test")
fi

# bench NAME CMD...: a benchmark or smoke run whose output is kept but for
# the servers' info logs; it fails on its own checks.
bench() {
  local name=$1
  shift
  log "$name"
  "$@" 2>&1 | grep -v -E 'level=(INFO|DEBUG)' || failed+=("$name")
}

# Smoke runs of the benchmarks: one round each, asserting what they measure
# (the full tier prints the medians). Guest memory surviving pause/resume is
# a test of its own (go test ./internal/runtime/vm).
# The template build smoke's build sandboxes have a network scope and a
# server scope (8: OCI root, cgroup parent, ID ranges) of their own
# (package buildbench): with two e2e
# lanes it runs at the head of the second, beside the microVM suites.
rts=" ${MOAT_E2E_RUNTIMES:-container vm gvisor} "
two_lanes=
if [ "${MOAT_E2E_LANES:-2}" = 2 ] && [[ "$rts" == *" vm "* ]] && [[ "$rts" == *" container "* || "$rts" == *" gvisor "* ]]; then
  two_lanes=1
fi
template_smoke() {
  bench "smoke: template build cold vs fully cached vs last step changed (cached/cold < 0.05)" \
    bin/moat bench --template-build --data-dir "$MOAT_DATA_DIR"
}
[ -n "$two_lanes" ] || template_smoke
if [ "$tier" = full ]; then
  bench "benchmark: microVM pause/resume vs migrate-to-file (BenchmarkPauseResume)" \
    env MOAT_BENCH_PAUSE_ROUNDS="${MOAT_BENCH_PAUSE_ROUNDS:-2}" go test ./internal/runtime/vm/ -run '^$' \
    -bench BenchmarkPauseResume -benchtime=1x -count=1 -timeout 30m
  bench "benchmark: microVM create→first command jailed vs not (moat bench --vm-jail)" \
    bin/moat bench --vm-jail -n "${MOAT_BENCH_JAIL_ROUNDS:-5}" --data-dir "$MOAT_DATA_DIR"
  bench "benchmark: container create→first command unpooled, pooled, vs bare crun; 20 at once (moat bench --start)" \
    bin/moat bench --start -n "${MOAT_BENCH_START_ROUNDS:-10}" --data-dir "$MOAT_DATA_DIR"
  bench "benchmark: microVM create→first command (moat bench --start --runtime vm)" \
    bin/moat bench --start --runtime vm -n "${MOAT_BENCH_START_VM_ROUNDS:-10}" --data-dir "$MOAT_DATA_DIR"
  log "measurement: sandbox death → reported gone (container init and microVM QEMU SIGKILLed)"
  go test ./internal/runtime/runtimetest/ -run 'TestContainerDeath|TestVM/OrchestratorReportsDeath' -count=1 -v -timeout 10m 2>&1 |
    grep -E 'death-to-gone|^(--- FAIL|FAIL)' || failed+=("death measurement")
  bench "benchmark: files through the proxy, envd vs a bare file server in the same sandbox (moat bench --files)" \
    bin/moat bench --files --data-dir "$MOAT_DATA_DIR"
  bench "benchmark: creates per second through the API (BenchmarkCreateThroughput)" \
    go test ./cmd/moat/ -run '^$' -bench BenchmarkCreateThroughput -benchtime=1x -count=1 -timeout 20m
  bench "benchmark: create→first command on SQLite vs PostgreSQL (BenchmarkStoreCreateFirstCommand)" \
    go test ./cmd/moat/ -run '^$' -bench BenchmarkStoreCreateFirstCommand -benchtime=1x -count=1 -timeout 20m
  bench "benchmark: placement on PostgreSQL with 10, 100 and 500 nodes (BenchmarkPlacement)" \
    go test ./internal/cluster/ -run '^$' -bench BenchmarkPlacement -benchtime=1x -count=1 -timeout 10m
  bench "benchmark: the cluster by simulation, 2,000 creates with 10, 100 and 500 nodes (moat bench --cluster)" \
    bin/moat bench --cluster --nodes 10,100,500 --sandboxes 2000
  bench "benchmark: the interpreter's round trip and the microVM accelerator choice" \
    go test ./test/interpreter/ ./internal/runtime/vm/ -run '^$' -bench 'BenchmarkLatency|BenchmarkAccelAuto' -benchtime=1x -count=1 -timeout 20m
  bench "fuzz: every Go fuzz target for 10 s, the NFS server's RPC decoder for 60 s (scripts/fuzz.sh)" \
    scripts/fuzz.sh
  bench "density: 200 containers and 50 microVMs (256 MiB), memory per idle sandbox, no leftovers (moat bench --density)" \
    bin/moat bench --density --data-dir "$MOAT_DATA_DIR"
else
  bench "smoke density: 20 containers and 3 microVMs at once, a command in each, no leftovers (moat bench --density)" \
    bin/moat bench --density --containers 20 --vms 3 --idle 2s --data-dir "$MOAT_DATA_DIR"
fi

# e2e PHASE RUNTIME SUITE...: the suites (names without .test.mjs) in
# test/e2e with the official e2b npm SDK against a real moat serve, one node
# process per suite, each writing TAP for the phase's report. The TAP goes
# to stdout (a file) and the spec output to stderr (the log): both are
# written synchronously, while a --test-reporter-destination file is a
# stream that --test-force-exit cuts off before the run's totals.
e2e() {
  local phase=$1 rt=$2 s rc=0 bench=
  shift 2
  # The full tier prints the suites' medians (files.read vs raw, proxy and
  # injection latency, volume throughput) on containers and container,vm.
  [ "$tier" = full ] && [[ $rt == container || $rt == container,vm ]] && bench=1
  log "e2e $phase (runtime $rt, e2b $(node -p "require('./test/e2e/package.json').dependencies.e2b")): $*"
  mkdir -p "$work/$phase"
  for s in "$@"; do
    # The suites that build a simulated internet (fixed names, host routes)
    # take turns across the lanes.
    local lock=()
    [[ " $net_suites " == *" $s "* ]] && lock=(flock "$work/e2e-net.lock")
    local only=()
    [ -z "${E2E_ONLY:-}" ] || only=("--test-name-pattern=$E2E_ONLY")
    (cd test/e2e && MOAT_E2E_RUNTIME=$rt MOAT_E2E_BENCH=$bench "${lock[@]}" node --test --test-concurrency=1 --test-timeout=600000 --test-force-exit "${only[@]}" \
      --test-reporter=spec --test-reporter-destination=stderr \
      --test-reporter=tap --test-reporter-destination=stdout "./$s.test.mjs" 2>&1 >"$work/$phase/$s.tap") || rc=1
  done
  "$report" tap "$phase" "$work/$phase"/*.tap || rc=1
  if [ "$rc" != 0 ]; then
    failed+=("e2e $phase")
    for f in "$MOAT_E2E_LOG_DIR"/*.log; do
      [ -f "$f" ] || continue
      printf '\n--- warnings and errors in %s ---\n' "$f" >&2
      grep -E 'level=(WARN|ERROR)' "$f" | tail -n 20 >&2 || true
    done
  fi
  rm -f "$MOAT_E2E_LOG_DIR"/*.log
}

# pick SUITE...: the suites that MOAT_E2E_SUITES (if set) allows.
pick() {
  local s out=
  for s in "$@"; do
    [ -z "${MOAT_E2E_SUITES:-}" ] || [[ " $MOAT_E2E_SUITES " == *" $s "* ]] || continue
    out+=" $s"
  done
  echo "$out"
}

# What each runtime must prove (docs/development.md): every suite on
# containers; on microVMs and gVisor the suites whose behaviour depends on
# the runtime; the custom template (`e2e-custom`, left by templates) reruns
# what differs in a sandbox of it. The full tier adds the rest.
all=$(cd test/e2e && ls ./*.test.mjs | sed 's|^\./||; s|\.test\.mjs$||' | grep -v -x runtimes)
# domains and inject (the egress resolver and proxy, on the host, the same
# for every runtime) run on microVMs in the full tier.
vm_suites="lifecycle commands pty files interpreter isolation pause fork volumes restart concurrency pool hostnet netpolicy"
gvisor_suites="commands files interpreter isolation lifecycle pause volumes"
custom_suites="commands files"
if [ "$tier" = full ]; then
  vm_suites=$(echo "$all" | grep -v -x -e secrets -e mcp -e console) # the Secret API, moat mcp and the console are runtime-independent
  custom_suites="commands files isolation netpolicy"
fi
net_suites="hostnet netpolicy domains inject isolation"
for rt in $rts; do
  case $rt in container | vm | gvisor) ;; *) die "unknown runtime $rt in MOAT_E2E_RUNTIMES" ;; esac
done

# e2e_runtime RT: the runtime's suites, and on container the reruns in the
# custom template that the templates suite leaves (`e2e-custom`, built from
# an OCI image in its own registry, with aptInstall, copy, envs, workdir,
# user, runCmd).
e2e_runtime() {
  local rt=$1 suites
  case $rt in
  container) suites=$all ;;
  vm) suites=$vm_suites ;;
  gvisor) suites=$gvisor_suites ;;
  esac
  # shellcheck disable=SC2046
  set -- $(pick $suites)
  [ $# -gt 0 ] && e2e "$rt" "$rt" "$@"
  if [[ " $* " == *" templates "* ]] && [ "$rt" != gvisor ]; then
    # shellcheck disable=SC2086
    MOAT_E2E_TEMPLATE=e2e-custom MOAT_E2E_WORKDIR=/opt/app e2e "$rt-custom-template" "$rt" $custom_suites
  fi
}

# Two lanes at once (docs/development.md): the microVM suites, which keep
# a core busy with TCG, in the host scope on $MOAT_DATA_DIR; the container
# and gVisor suites, which mostly wait, in a second server scope
# (`moat serve --scope 1`: host objects named apart) on a data dir whose
# templates and build cache are hard links of the first's. MOAT_E2E_LANES=1
# runs everything in one lane, one runtime after another.
lane2="$MOAT_DATA_DIR-s1"
if [ -n "$two_lanes" ]; then
  log "e2e in two lanes: vm (host scope, $MOAT_DATA_DIR) beside container and gvisor (scope 1, $lane2)"
  # An earlier run's lane-2 dir (hundreds of thousands of files) goes in
  # the background.
  if [ -e "$lane2" ]; then
    mv "$lane2" "$lane2.old.$$" || die "cannot move the old $lane2 aside"
  fi
  rm -rf "$lane2".old.* &
  mkdir -p "$lane2" || die "cannot make $lane2"
  cp -al "$MOAT_DATA_DIR/templates" "$lane2/templates" || die "hard links of the templates in $lane2"
  [ ! -d "$MOAT_DATA_DIR/cache" ] || cp -al "$MOAT_DATA_DIR/cache" "$lane2/cache" || die "hard links of the build cache in $lane2"
  cp -p "$MOAT_DATA_DIR/moat.db" "$lane2/moat.db" || die "copy of moat.db"
  [ ! -f "$MOAT_DATA_DIR/secrets.key" ] || cp -p "$MOAT_DATA_DIR/secrets.key" "$lane2/" || die "copy of secrets.key"
  # The templates' rows name their rootfs by absolute path. Sandboxes and
  # nodes are the first lane's (a server leaves another node's rows alone).
  sqlite3 "$lane2/moat.db" "UPDATE templates SET rootfs_dir = '$lane2' || substr(rootfs_dir, length('$MOAT_DATA_DIR') + 1) WHERE rootfs_dir LIKE '$MOAT_DATA_DIR/%'; DELETE FROM sandboxes; DELETE FROM nodes" ||
    die "rewrite the template paths in $lane2/moat.db"
  (
    export MOAT_DATA_DIR="$lane2" MOAT_E2E_DATA_DIR="$lane2" MOAT_E2E_SCOPE=1
    export MOAT_E2E_LOG_DIR="$MOAT_E2E_LOG_DIR/s1"
    mkdir -p "$MOAT_E2E_LOG_DIR"
    phase_names=() phase_starts=() failed=()
    template_smoke
    for rt in container gvisor; do
      [[ "$rts" == *" $rt "* ]] && e2e_runtime "$rt"
    done
    phase_times
    printf '%s\n' "${failed[@]}" >"$work/lane2.failed"
  ) >"$work/lane2.log" 2>&1 &
  lane2_pid=$!
  e2e_runtime vm
  wait "$lane2_pid" || true
  log "lane 2 (container, gvisor; scope 1) output:"
  cat "$work/lane2.log" >&2
  [ -f "$work/lane2.failed" ] || failed+=("e2e lane 2 (it did not finish)")
  while read -r f; do [ -z "$f" ] || failed+=("$f"); done <"$work/lane2.failed" 2>/dev/null || true
else
  for rt in $rts; do e2e_runtime "$rt"; done
fi
# All three runtimes in one server, and one volume shared by a container
# and a microVM (with the volume throughput table in the full tier).
if [[ "$rts" == *" container "* && "$rts" == *" vm "* && "$rts" == *" gvisor "* ]]; then
  set -- $(pick runtimes)
  [ $# -gt 0 ] && e2e "container,gvisor,vm" "container,gvisor,vm" runtimes
fi
# Template builds on a server without the container runtime: RUN and COPY
# steps run in gVisor build sandboxes (E2E_ONLY: the build tests whose
# build runtime matters; the rest of the suite ran on containers).
if [[ "$rts" == *" gvisor "* && "$rts" == *" vm "* ]]; then
  set -- $(pick templates)
  [ $# -gt 0 ] && E2E_ONLY='copy: the SDK|FROM a template' e2e "gvisor,vm" "gvisor,vm" templates
fi
if [[ "$rts" == *" container "* && "$rts" == *" vm "* ]]; then
  set -- $(pick volumes)
  [ $# -gt 0 ] && e2e "container,vm" "container,vm" volumes
fi

# The SDK suites that need no particular runtime through an API server in
# front of three nodes, each server in its own network namespace on a
# bridge (scripts/cluster.sh; docs/cluster.md).
if [ "$tier" = full ]; then
  set -- $(pick commands files pty lifecycle errors concurrency pause interpreter fork events volumes)
  if [ $# -gt 0 ]; then
    log "cluster: PostgreSQL, an API server and three nodes, each in a network namespace of its own (scripts/cluster.sh)"
    cdir="$work/cluster"
    mkdir -p "$cdir"
    chmod 711 "$work" # PostgreSQL (as nobody) and the sandboxes reach cdir through it
    if scripts/cluster.sh up "$cdir" "$MOAT_DATA_DIR"; then
      # shellcheck source=/dev/null
      source "$cdir/env"
      e2e cluster container "$@"
      unset MOAT_E2E_API_URL MOAT_E2E_API_KEY
    else
      failed+=("cluster: start")
    fi
    scripts/cluster.sh down "$cdir" || failed+=("cluster: spread or leftovers")
  fi
fi

log "final host leak check"
leaks="$(
  {
    for d in "$MOAT_DATA_DIR" "$lane2"; do
      for rt in runc crun runsc; do
        for root in "/run/moat/$rt" /run/moat/s[0-9]/container /run/moat/s[0-9]/gvisor; do
          [ -d "$root" ] && "$rt" --root "$root" list 2>/dev/null | grep -E "$d/(gvisor/)?sandboxes/"
        done
      done
      grep -E "$d/(vm/|gvisor/)?sandboxes/" /proc/self/mountinfo
      grep -sH "$d/sandboxes/" /sys/block/loop*/loop/backing_file
      for sub in sandboxes vm/sandboxes gvisor/sandboxes; do
        [ -d "$d/$sub" ] && find "$d/$sub" -mindepth 1 -maxdepth 1
      done
    done
    # the host scope's and server scopes' (moat-, moats<N>-), the Go tests'
    # (moatt*, moatgw*) and the benchmarks' (moatb?-)
    ip netns list 2>/dev/null | grep -E '^moat(-|s[0-9]+-|t|gw|b[a-z]-)'
    ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | grep -E '^(mh|s1)'
    # A scoped server deletes its tables when it stops with no sandbox, and
    # the Go tests and benchmarks delete theirs; the host scope's ("moat") stay by design.
    nft list tables 2>/dev/null | grep -E ' moat(s[0-9]+|[bt][a-z]+)$'
    pgrep -af 'qemu-system.* -name moat-'
    pgrep -af '(crun|runc|runsc) .*(moat-seccomp-|/run/moat/)'
    pgrep -af '^moat-nfsd '
    find /sys/fs/cgroup -mindepth 2 -maxdepth 3 -type d \( -path '*/moat/*' -o -path '*/moat-s[0-9]/*' \) 2>/dev/null
  } || true
)"
if [ -n "$leaks" ]; then
  printf 'leftovers on the host after the suites:\n%s\n' "$leaks" >&2
  failed+=("leak check")
fi

phase_times
rc=0
if [ "${#failed[@]}" -gt 0 ]; then
  log "FAILED: ${failed[*]}"
  rc=1
else
  log "all tests passed ($tier tier)"
fi
# The last line: "total: N passed, N failed, N skipped".
"$report" summary || rc=1
exit "$rc"
