#!/usr/bin/env bash
# The README's second command: the whole test suite.
#
#   1. scripts/setup.sh with MOAT_DATA_DIR=/var/lib/moat-ci (the template
#      cache for tests; the first run builds it, later runs reuse it)
#   2. go generate ./api/... must leave api/ unchanged (generated protobuf
#      and OpenAPI code is current), scripts/pkgsize.sh (no package over
#      1,500 non-test lines), then go vet ./..., staticcheck ./...
#      (pinned; installed into a temp dir), the client build for macOS
#      (GOOS=darwin go build/vet of cmd/moat and sdk/...) and go test ./...
#      (as root: runtime tests need it)
#   3. benchmarks that print medians and ratios: microVM pause/resume
#      (256 MiB, 1 GiB, 2 GiB against plain migrate-to-file; ~4 minutes),
#      the QEMU jail's cost on microVM create (jailed vs not), template
#      builds, container and microVM create→first command (moat bench
#      --start, --start --runtime vm), sandbox death → reported gone, and
#      creates per second through the API (1 client vs the configured
#      concurrency)
#   3b. the density test: 200 containers + 50 microVMs (256 MiB) at once,
#      a command in each, host memory per idle sandbox, then no leftovers
#      (moat bench --density; ~2 minutes)
#   4. the end-to-end suites in test/e2e with the official e2b npm SDK, then
#      the commands, files and isolation suites again on a custom template
#      (`e2e-custom`, built by templates.test.mjs); runtimes.test.mjs on one
#      container,gvisor,vm server; volumes.test.mjs's mixed case (one volume
#      in a container and a microVM) and volume throughput bench on one
#      container,vm server
#   5. a final host leak check (no moat containers, netns, veths, mounts,
#      loop devices, QEMU or volume server processes left)
#
# Environment:
#   MOAT_CI_DATA_DIR    test data dir (default /var/lib/moat-ci)
#   MOAT_E2E_SUITES     space-separated suite files to run (default: all *.test.mjs)
#   MOAT_E2E_RUNTIMES   runtimes to run the suites on (default: "container vm gvisor");
#                       gvisor runs only MOAT_E2E_GVISOR_SUITES, and runtimes.test.mjs
#                       (all three in one server) runs once after the loop
#   MOAT_E2E_GVISOR_SUITES suites run on gvisor (default: commands files
#                       interpreter isolation lifecycle pause volumes)
#   MOAT_TEST_SKIP_GO=1 skip go vet / staticcheck / darwin build / go test
#   MOAT_TEST_SKIP_BENCH=1 skip the benchmarks
#   MOAT_TEST_SKIP_DENSITY=1 skip the density test
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
repo="$(pwd)"
export MOAT_DATA_DIR="${MOAT_CI_DATA_DIR:-/var/lib/moat-ci}"
export MOAT_E2E_DATA_DIR="$MOAT_DATA_DIR"
export MOAT_BIN="$repo/bin/moat"
# Every e2e server's full log lands here; the tail is printed when a suite fails.
export MOAT_E2E_LOG_DIR="${MOAT_E2E_LOG_DIR:-$(mktemp -d /tmp/moat-e2e-logs.XXXXXX)}"

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
  printf '==> phase durations (total %dm%02ds):\n' $((SECONDS / 60)) $((SECONDS % 60)) >&2
  for i in "${!phase_names[@]}"; do
    end=${phase_starts[$((i + 1))]:-$SECONDS}
    printf '%6ds  %s\n' $((end - phase_starts[i])) "${phase_names[$i]}" >&2
  done
}

# Anything this script (or the suites it runs) leaves running is stopped on
# exit. The suites stop their own servers; this catches the rest by PID.
started_pids=()
cleanup() {
  local rc=$?
  for pid in "${started_pids[@]}"; do
    kill -TERM "$pid" 2>/dev/null || true
  done
  # moat serve processes started by the e2e harness are children of node,
  # which node --test kills on failure; catch survivors that use our data dir.
  for pid in $(pgrep -f "^$repo/bin/moat serve .*--data-dir $MOAT_DATA_DIR" 2>/dev/null || true); do
    [ "$pid" = "$$" ] && continue
    kill -TERM "$pid" 2>/dev/null || true
    sleep 2
    kill -KILL "$pid" 2>/dev/null || true
  done
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

failed=()
# The staticcheck release that supports the go.mod toolchain (Go 1.26).
staticcheck_version=v0.8.2

log "setup (template cache: $MOAT_DATA_DIR/templates)"
scripts/setup.sh

# The npm SDKs first: some Go tests (internal/app) drive the real e2b SDK too.
log "npm ci (test/e2e)"
(cd test/e2e && npm ci --no-audit --no-fund)

# Generated code (protobuf and OpenAPI) must be what its sources generate.
log "go generate ./api/... (generated files must be up to date)"
if ! go generate ./api/...; then
  failed+=("go generate")
elif ! git diff --exit-code -- api || [ -n "$(git status --porcelain -- api)" ]; then
  git status --short -- api >&2
  log "generated files under api/ differ from what \`go generate ./api/...\` writes: run it and commit the result"
  failed+=("generated files")
fi

if [ "${MOAT_TEST_SKIP_GO:-0}" != 1 ]; then
  log "package sizes (scripts/pkgsize.sh: no package over 1500 non-test lines)"
  PKGSIZE_QUIET=1 scripts/pkgsize.sh || failed+=("package sizes")
  log "go vet ./..."
  go vet ./... || failed+=("go vet")
  # staticcheck, pinned, installed from the module proxy into a temporary
  # GOBIN so a clean clone needs nothing preinstalled (~30 s build + ~30 s run).
  log "staticcheck ./... ($staticcheck_version)"
  sc_bin="$(mktemp -d /tmp/moat-staticcheck.XXXXXX)"
  if GOBIN="$sc_bin" go install "honnef.co/go/tools/cmd/staticcheck@$staticcheck_version"; then
    "$sc_bin/staticcheck" ./... || failed+=("staticcheck")
  else
    failed+=("staticcheck (install)")
  fi
  rm -rf "$sc_bin"
  # The client side builds for macOS: the CLI's client commands and the Go SDK
  # (server-only code is behind //go:build linux; ~50 s cold, seconds warm).
  log "client build for macOS: GOOS=darwin go build ./cmd/moat ./sdk/... (arm64, amd64) and go vet"
  darwin_out="$(mktemp -d /tmp/moat-darwin.XXXXXX)"
  for arch in arm64 amd64; do
    GOOS=darwin GOARCH=$arch go build -o "$darwin_out/moat-$arch" ./cmd/moat &&
      GOOS=darwin GOARCH=$arch go build ./sdk/... || failed+=("darwin/$arch build")
  done
  GOOS=darwin GOARCH=arm64 go vet ./cmd/moat ./internal/cli/templatebuild ./sdk/... || failed+=("darwin vet")
  rm -rf "$darwin_out"
  log "go test ./... -count=1 -timeout 30m"
  go test ./... -count=1 -timeout 30m || failed+=("go test")
fi

if [ "${MOAT_TEST_SKIP_BENCH:-0}" != 1 ]; then
  log "benchmark: microVM pause/resume vs migrate-to-file (go test -bench BenchmarkPauseResume)"
  MOAT_BENCH_PAUSE_ROUNDS="${MOAT_BENCH_PAUSE_ROUNDS:-2}" go test ./internal/runtime/vm/ -run '^$' \
    -bench BenchmarkPauseResume -benchtime=1x -count=1 -timeout 30m 2>&1 | grep -v 'level=INFO' ||
    failed+=("pause benchmark")
  log "benchmark: microVM create→first command with and without the QEMU jail (moat bench --vm-jail)"
  bin/moat bench --vm-jail -n "${MOAT_BENCH_JAIL_ROUNDS:-5}" --data-dir "$MOAT_DATA_DIR" 2>&1 |
    grep -v -E 'level=(INFO|DEBUG)' || failed+=("jail benchmark")
  log "benchmark: template build cold vs fully cached vs last step changed (moat bench --template-build)"
  bin/moat bench --template-build --data-dir "$MOAT_DATA_DIR" 2>&1 | grep -v -E 'level=(INFO|DEBUG)' || failed+=("template build benchmark")
  log "benchmark: container create→first command unpooled, pooled, vs bare crun; 20 creates at once (moat bench --start)"
  bin/moat bench --start -n "${MOAT_BENCH_START_ROUNDS:-10}" --data-dir "$MOAT_DATA_DIR" 2>&1 | grep -v -E 'level=(INFO|DEBUG)' || failed+=("start benchmark")
  log "benchmark: microVM create→first command unpooled, pooled, vs a cold boot and a raw QEMU restore (moat bench --start --runtime vm)"
  bin/moat bench --start --runtime vm -n "${MOAT_BENCH_START_VM_ROUNDS:-10}" --data-dir "$MOAT_DATA_DIR" 2>&1 |
    grep -v -E 'level=(INFO|DEBUG)' || failed+=("microVM start benchmark")
  log "measurement: sandbox death → reported gone (SIGKILL of a container's init and of a microVM's QEMU; ~15 s)"
  go test ./internal/runtime/runtimetest/ -run 'TestContainerDeath|TestVM/OrchestratorReportsDeath' -count=1 -v -timeout 10m 2>&1 |
    grep -E 'death-to-gone|^(--- FAIL|FAIL)' || failed+=("death measurement")
  log "benchmark: creates per second through the API (go test -bench BenchmarkCreateThroughput)"
  go test ./cmd/moat/ -run '^$' -bench BenchmarkCreateThroughput -benchtime=1x -count=1 -timeout 20m 2>&1 |
    grep -v 'level=INFO' || failed+=("create throughput benchmark")
fi

# Issue 12's density test: it fails on a sandbox that does not answer or on
# anything left on the host after the kill; the memory figures are printed.
if [ "${MOAT_TEST_SKIP_DENSITY:-0}" != 1 ]; then
  log "density: 200 containers and 50 microVMs (256 MiB) at once, host memory per idle sandbox, no leftovers (moat bench --density)"
  bin/moat bench --density --data-dir "$MOAT_DATA_DIR" 2>&1 | grep -v -E 'level=(INFO|DEBUG)' || failed+=("density test")
fi

# The same suites run once per runtime: containers (crun/runc), then microVMs
# (QEMU; TCG on hosts like CI where KVM cannot boot a guest), then gVisor
# (runsc) for the suites in MOAT_E2E_GVISOR_SUITES.
e2e() { # runtime suites...
  local rt=$1
  shift
  log "end-to-end suites on runtime '$rt' (test/e2e, e2b $(node -p "require('./test/e2e/package.json').dependencies.e2b")): $*"
  (
    cd test/e2e
    # domains.test.mjs's proxy benchmark (no policy vs a domain allow list;
    # adds ~6 s) and inject.test.mjs's (HTTPS with an injected header vs
    # spliced) print their medians in every run, on containers.
    bench=; [ "$rt" = container ] && [ "${MOAT_TEST_SKIP_BENCH:-0}" != 1 ] && bench=1
    MOAT_E2E_RUNTIME=$rt MOAT_E2E_BENCH=${MOAT_E2E_BENCH:-$bench} node --test --test-concurrency=1 --test-timeout=600000 --test-force-exit "$@"
  ) || {
    failed+=("e2e ($rt)")
    for f in "$MOAT_E2E_LOG_DIR"/*.log; do
      [ -f "$f" ] || continue
      printf '\n--- warnings and errors in %s ---\n' "$f" >&2
      grep -E 'level=(WARN|ERROR)' "$f" | tail -n 20 >&2 || true
    done
  }
}
# shellcheck disable=SC2086
all_suites=$(cd test/e2e && echo ${MOAT_E2E_SUITES:-$(ls ./*.test.mjs)})
gvisor_suites=" ${MOAT_E2E_GVISOR_SUITES:-commands files interpreter isolation lifecycle pause volumes} "
for rt in ${MOAT_E2E_RUNTIMES:-container vm gvisor}; do
  suites=
  for s in $all_suites; do
    n=$(basename "$s" .test.mjs)
    [ "$n" = runtimes ] && continue # all runtimes in one server: once, below
    [ "$n" = secrets ] && [ "$rt" != container ] && continue # runtime-independent (~1 s): container loop only
    # inject (network.rules header injection) runs in the container and vm
    # loops: envd installs the egress CA in each runtime's own way of
    # holding files; gVisor only runs gvisor_suites.
    [ "$rt" = gvisor ] && [ "${gvisor_suites/ $n /}" = "$gvisor_suites" ] && continue
    suites+=" $s"
  done
  [ "$rt" = gvisor ] && { e2e "$rt" $suites; continue; } # no custom-template rerun on gvisor
  # shellcheck disable=SC2086
  e2e "$rt" $suites
  # templates.test.mjs leaves `e2e-custom` (built from an OCI image in its
  # own registry, with aptInstall, copy, envs, workdir, user, runCmd):
  # sandboxes from it must pass the same command, file, isolation and network
  # policy suites.
  case " $all_suites " in
  *templates.test.mjs*)
    MOAT_E2E_TEMPLATE=e2e-custom MOAT_E2E_WORKDIR=/opt/app e2e "$rt" ./commands.test.mjs ./files.test.mjs ./isolation.test.mjs ./netpolicy.test.mjs
    ;;
  esac
done

case " $all_suites " in
*runtimes.test.mjs*) e2e "container,gvisor,vm" ./runtimes.test.mjs ;;
esac

# One volume in a container and a microVM sandbox at once on a
# container,vm server, each reading the other's writes, and (unless
# MOAT_TEST_SKIP_BENCH=1) the sequential throughput of a volume next to each
# sandbox's own disk, from both (~3 min under TCG).
rts=" ${MOAT_E2E_RUNTIMES:-container vm gvisor} "
case " $all_suites " in
*volumes.test.mjs*)
  if [ "${rts/ container /}" != "$rts" ] && [ "${rts/ vm /}" != "$rts" ]; then
    vbench=1; [ "${MOAT_TEST_SKIP_BENCH:-0}" = 1 ] && vbench=
    MOAT_E2E_BENCH=${MOAT_E2E_BENCH:-$vbench} e2e "container,vm" ./volumes.test.mjs
  fi
  ;;
esac

log "final host leak check"
leaks="$(
  {
    for rt in runc crun; do
      [ -d "/run/moat/$rt" ] && "$rt" --root "/run/moat/$rt" list 2>/dev/null | grep -F "$MOAT_DATA_DIR/sandboxes/"
    done
    ip netns list 2>/dev/null | grep -E '^moat-[a-z0-9]+( |$)'
    ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | grep -E '^mh' 
    grep -E "$MOAT_DATA_DIR/(vm/|gvisor/)?sandboxes/" /proc/self/mountinfo
    grep -sH "$MOAT_DATA_DIR/sandboxes/" /sys/block/loop*/loop/backing_file
    [ -d "$MOAT_DATA_DIR/sandboxes" ] && find "$MOAT_DATA_DIR/sandboxes" -mindepth 1 -maxdepth 1
    [ -d "$MOAT_DATA_DIR/vm/sandboxes" ] && find "$MOAT_DATA_DIR/vm/sandboxes" -mindepth 1 -maxdepth 1
    [ -d "$MOAT_DATA_DIR/gvisor/sandboxes" ] && find "$MOAT_DATA_DIR/gvisor/sandboxes" -mindepth 1 -maxdepth 1
    [ -d /run/moat/runsc ] && runsc --root /run/moat/runsc list 2>/dev/null | grep -F "$MOAT_DATA_DIR/gvisor/sandboxes/"
    pgrep -af 'qemu-system.* -name moat-'
    pgrep -af '(crun|runc|runsc) .*(moat-seccomp-|/run/moat/)'
    pgrep -af '^moat-nfsd '
    find /sys/fs/cgroup -mindepth 2 -maxdepth 3 -type d -path '*/moat/*' 2>/dev/null
  } || true
)"
if [ -n "$leaks" ]; then
  printf 'leftovers on the host after the suites:\n%s\n' "$leaks" >&2
  failed+=("leak check")
fi

phase_times
if [ "${#failed[@]}" -gt 0 ]; then
  log "FAILED: ${failed[*]}"
  exit 1
fi
log "all tests passed"
