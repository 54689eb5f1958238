#!/usr/bin/env bash
# Prepare a Debian 12 host for Moat: install the host packages, build the
# binaries and the base template. Idempotent: a second run installs nothing,
# rebuilds only what changed, and reuses the cached template.
#
# Environment:
#   MOAT_DATA_DIR          data dir whose templates/ cache is filled (default /var/lib/moat)
#   MOAT_SETUP_SKIP_APT=1  do not touch apt at all
#   MOAT_SETUP_FORCE_APT=1 run apt-get update/install even if everything is present
#   MOAT_SETUP_SKIP_RUNSC=1 keep Debian's runsc (no current runsc in /usr/local/bin)
#   MOAT_SETUP_TEMPLATES   templates to build (default "base")
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
MOAT_DATA_DIR="${MOAT_DATA_DIR:-/var/lib/moat}"
# Templates to build (the quickstart needs base; scripts/test.sh asks for
# code-interpreter-v1 too).
MOAT_SETUP_TEMPLATES="${MOAT_SETUP_TEMPLATES:-base}"

log() { printf '==> %s\n' "$*" >&2; }
die() { printf 'setup: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || die "run as root (sandboxes need namespaces, cgroups, veths and mounts): sudo env \"PATH=\$PATH\" $0"

# Host packages. runc is the container runtime; crun is the alternative;
# mmdebstrap builds the Debian root filesystems; uidmap, nftables, iptables
# and iproute2 set up users and per-sandbox networks; busybox-static and
# e2fsprogs are used for template images; procps/psmisc for process checks.
PACKAGES=(
  runc crun mmdebstrap debian-archive-keyring uidmap
  nftables iptables iproute2 busybox-static e2fsprogs
  curl ca-certificates openssl procps psmisc util-linux make git
  # scripts/test.sh: its second e2e lane's data dir (a copy of moat.db)
  sqlite3
  # go generate ./api/...: protoc and the well-known .proto files
  protobuf-compiler libprotobuf-dev
  # gVisor runtime: Debian's runsc (see the current one built below)
  runsc
  # microVM runtime: QEMU (TCG where KVM does not work) and Debian's cloud kernel
  qemu-system-x86 qemu-utils linux-image-cloud-amd64
  # the PostgreSQL store's tests start a private server (initdb in a temp dir)
  postgresql-15
  # code interpreter tests run real Jupyter kernels on the host
  python3-ipykernel python3-matplotlib python3-pandas python3-numpy
  # moat sandbox shell is tested in a real terminal (TestShellTmux)
  tmux
  # TestSealedRuntime counts crun's execs (internal/runtime/container/oci)
  strace
  # the web console is tested in a real browser (test/e2e/console.test.mjs, playwright-core)
  chromium
)

if [ "${MOAT_SETUP_SKIP_APT:-0}" != 1 ]; then
  missing=()
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  if [ "${#missing[@]}" -gt 0 ] || [ "${MOAT_SETUP_FORCE_APT:-0}" = 1 ]; then
    log "apt-get install ${missing[*]:-${PACKAGES[*]}}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update
    apt-get install -y --no-install-recommends "${PACKAGES[@]}"
  else
    log "host packages present"
  fi
fi

# Go builds the binaries; Node runs the SDK end-to-end tests.
# Go may be installed where sudo's secure_path does not look.
command -v go >/dev/null || { [ -x /usr/local/go/bin/go ] && PATH="$PATH:/usr/local/go/bin"; }
command -v go >/dev/null || die "Go not found on PATH (need the version in go.mod; see https://go.dev/dl/)"
if command -v node >/dev/null; then
  node_major="$(node -p 'process.versions.node.split(".")[0]')"
  [ "$node_major" -ge 20 ] || log "warning: Node $(node --version) is older than 20; the e2e suites need Node >= 20.18"
else
  log "warning: node not found; the end-to-end suites (test/e2e) need Node >= 20.18 and npm"
fi

log "make build"
make build

# Debian 12's runsc (0.0~20221219) answers statx with AT_NO_AUTOMOUNT with
# EINVAL, so `ls -l` and `stat` fail in its sandboxes. A current runsc is
# built from gVisor's Go module (its "go" branch, pinned) into
# /usr/local/bin, which comes first on PATH; the gvisor runtime uses it.
# Takes about a minute (module download and build); skipped once present.
RUNSC_VERSION=v0.0.0-20260905035102-160fafc42237
if [ "${MOAT_SETUP_SKIP_RUNSC:-0}" != 1 ] && ! grep -qs "$RUNSC_VERSION" /usr/local/lib/moat-runsc.version; then
  log "build runsc $RUNSC_VERSION into /usr/local/bin (gVisor's Go module)"
  GOBIN=/usr/local/bin CGO_ENABLED=0 go install -ldflags "-X gvisor.dev/gvisor/runsc/version.version=$RUNSC_VERSION" \
    "gvisor.dev/gvisor/runsc@$RUNSC_VERSION"
  mkdir -p /usr/local/lib && echo "$RUNSC_VERSION" >/usr/local/lib/moat-runsc.version
fi

# base is Debian bookworm with envd; code-interpreter-v1 (E2B's default for
# @e2b/code-interpreter) adds Jupyter kernels for Python (numpy, pandas,
# matplotlib, ...), R (IRkernel) and JavaScript/TypeScript (Deno, fetched
# with `npm pack`, so it needs npm). Each is cached under
# $MOAT_DATA_DIR/templates; a cold build takes about 1–4 minutes.
mkdir -p "$MOAT_DATA_DIR"
for t in $MOAT_SETUP_TEMPLATES; do
  log "template build $t (data dir $MOAT_DATA_DIR)"
  bin/moat template build "$t" --data-dir "$MOAT_DATA_DIR"
done

log "setup done: bin/moat, bin/envd, templates ($MOAT_SETUP_TEMPLATES) in $MOAT_DATA_DIR/templates"
