#!/usr/bin/env bash
# Removes what an earlier, interrupted test run left on the host, before a
# new run starts: a run that was killed (a CI time limit, ^C, a crashed
# lane) stops its servers but not their sandboxes, and the next run's final
# leak check would count those against it; their mounts also keep the old
# lane-2 data dirs (`<data dir>-s1.old.*`) from being removed, and the disk
# fills run after run.
#
#   scripts/sweep.sh DATA_DIR...
#
# For each data dir D (and D-s1, D-s1.old.*): the moat servers using it are
# stopped; the OCI containers and QEMU processes of its sandboxes are
# killed; the mounts below it are detached and the loop devices backed by
# its files released; the network namespaces and cgroups named after its
# sandboxes are deleted; its sandbox directories and their rows in moat.db
# go. Templates, the build cache and the microVM images stay. It prints
# what it found (nothing on a clean host) and never fails the run: what it
# cannot remove, the final leak check reports.
set -uo pipefail

# --host: also every Moat-named host object of any earlier run (the names
# the final leak check looks for: OCI containers under /run/moat, QEMU and
# moat-nfsd processes, netns moat-*, moats<N>-* and the Go tests' and
# benchmarks' (moatt*, moatgw*, moatb?-*), veths mh* and s<N>*,
# nftables tables moats<N>, moatt* (Go tests) and moatb* (benchmarks),
# cgroups moat/* and moat-s<N>/*, and the mounts and loop devices of test
# data dirs under /tmp), but only when no moat serve holds a host lock:
# then nothing on the host owns them.
host=
if [ "${1:-}" = --host ]; then
  host=1
  shift
fi

dirs=()
for d in "$@"; do
  d="${d%/}"
  for x in "$d" "$d"-s1 "$d"-s1.old.*; do
    [ -e "$x" ] && dirs+=("$x")
  done
done
[ "${#dirs[@]}" -gt 0 ] || [ -n "$host" ] || exit 0
pattern="$(printf '%s|' "${dirs[@]}" /nonexistent-moat-dir | sed 's/[.]/[.]/g; s/|$//')"

said=
say() {
  [ -n "$said" ] || echo "sweep: an earlier run left these on the host; removing them" >&2
  said=1
  echo "sweep: $*" >&2
}

# kill_container kills and deletes OCI container name of runtime rt's root.
kill_container() {
  say "$1 container $3 ($2)"
  "$1" --root "$2" kill "$3" KILL >/dev/null 2>&1
  "$1" --root "$2" delete -f "$3" >/dev/null 2>&1
}

# kill_pid SIGKILLs pid, saying what it runs.
kill_pid() {
  say "process $1: $(tr '\0' ' ' </proc/"$1"/cmdline 2>/dev/null | cut -c1-160)"
  kill -KILL "$1" 2>/dev/null
}

# release_mounts detaches the mounts whose mount point matches the
# extended regular expression re, deepest first and lazily (a process that
# still holds one cannot stop the rest), then the loop devices whose
# backing file matches it.
release_mounts() {
  local re=$1 m f dev
  while read -r m; do
    say "mount $m"
    umount -l "$m" 2>/dev/null
  done < <(awk '{print $5}' /proc/self/mountinfo | grep -E "$re" | sort -r)
  for f in /sys/block/loop*/loop/backing_file; do
    [ -f "$f" ] || continue
    if grep -qE "$re" "$f" 2>/dev/null; then
      dev="/dev/$(basename "$(dirname "$(dirname "$f")")")"
      say "loop device $dev ($(cat "$f"))"
      losetup -d "$dev" 2>/dev/null
    fi
  done
}

# remove_cgroup kills what is left in cgroup directory cg and removes it
# and its children.
remove_cgroup() {
  say "cgroup $1"
  { echo 1 >"$1/cgroup.kill"; } 2>/dev/null
  find "$1" -depth -type d -exec rmdir {} + 2>/dev/null
}

# sweep_host removes every Moat-named object on the host (see --host).
sweep_host() {
  local rt root id pid ns l cg
  for rt in crun runc runsc; do
    command -v "$rt" >/dev/null || continue
    for root in /run/moat/"$rt" /run/moat/s[0-9]/container /run/moat/s[0-9]/gvisor; do
      [ -d "$root" ] || continue
      for id in $("$rt" --root "$root" list -q 2>/dev/null); do
        kill_container "$rt" "$root" "$id"
      done
    done
  done
  for pid in $(pgrep -f 'qemu-system.* -name moat-' 2>/dev/null) $(pgrep -x moat-nfsd 2>/dev/null); do
    kill_pid "$pid"
  done
  sleep 0.5
  release_mounts '^/tmp/Test[^/]*/.*/sandboxes/'
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E '^moat(-|s[0-9]+-|t|gw|b[a-z]-)'); do
    say "network namespace $ns"
    ip netns delete "$ns" 2>/dev/null
  done
  for l in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1 | grep -E '^(mh|s[0-9])'); do
    say "link $l"
    ip link delete "$l" 2>/dev/null
  done
  # Scoped servers' and the Go tests' tables (the host scope's "moat" stays:
  # a server starting replaces it).
  for t in $(nft list tables 2>/dev/null | grep -E ' moat(s[0-9]+|[bt][a-z]+)$' | awk '{print $2 "/" $3}'); do
    say "nftables table ${t%/*} ${t#*/}"
    nft delete table "${t%/*}" "${t#*/}" 2>/dev/null
  done
  while read -r cg; do
    remove_cgroup "$cg"
  done < <(find /sys/fs/cgroup -mindepth 2 -maxdepth 4 -type d \( -path '*/moat/*' -o -path '*/moat-s[0-9]/*' \) 2>/dev/null | sort -r)
}

# The sandbox IDs of those dirs (each runtime keeps them under its own
# sandboxes/).
ids=()
for d in "${dirs[@]}"; do
  for sub in sandboxes vm/sandboxes gvisor/sandboxes; do
    for s in "$d/$sub"/*/; do
      [ -d "$s" ] && ids+=("$(basename "$s")")
    done
  done
done

# Servers first, so that nothing starts again behind the sweep.
for pid in $(pgrep -f "moat serve .*--data-dir ($pattern)( |$)" 2>/dev/null); do
  say "moat serve (pid $pid): $(tr '\0' ' ' </proc/"$pid"/cmdline 2>/dev/null)"
  kill -KILL "$pid" 2>/dev/null
done

for id in "${ids[@]}"; do
  for rt in crun runc runsc; do
    command -v "$rt" >/dev/null || continue
    for root in /run/moat/"$rt" /run/moat/s1/container /run/moat/s1/gvisor; do
      [ -d "$root" ] || continue
      if "$rt" --root "$root" state "moat-$id" >/dev/null 2>&1; then
        kill_container "$rt" "$root" "moat-$id"
      fi
    done
  done
  for pid in $(pgrep -f "qemu-system.* -name moat-$id( |,|$)" 2>/dev/null); do
    kill_pid "$pid"
  done
done
# Whatever else of a sandbox still runs from those dirs (runtime shims,
# moat-nfsd, envd under crun).
for pid in $(pgrep -f "^[^ ]*(qemu-system[^ ]*|crun|runc|runsc|moat-nfsd|envd) .*($pattern)/" 2>/dev/null); do
  kill_pid "$pid"
done
sleep 0.5
release_mounts "^($pattern)/"

for id in "${ids[@]}"; do
  for ns in "moat-$id" "moats1-$id"; do
    if [ -e "/run/netns/$ns" ]; then
      say "network namespace $ns"
      ip netns delete "$ns" 2>/dev/null
    fi
  done
  for cg in /sys/fs/cgroup/moat/"$id" /sys/fs/cgroup/moat-s1/"$id" /sys/fs/cgroup/*/moat/"$id" /sys/fs/cgroup/*/moat-s1/"$id"; do
    [ ! -d "$cg" ] || remove_cgroup "$cg"
  done
done

if [ -n "$host" ]; then
  held=
  for lock in /run/moat/serve*.lock; do
    [ -e "$lock" ] || continue
    flock -n "$lock" true 2>/dev/null || held="$lock"
  done
  if [ -n "$held" ]; then
    echo "sweep: a moat serve holds $held: the host's Moat objects are left alone" >&2
  else
    sweep_host
  fi
fi

# The sandboxes' files and rows; the old lane-2 dirs go whole.
for d in "${dirs[@]}"; do
  case $d in
  *-s1.old.*)
    # Hundreds of thousands of files: removed in the background.
    say "old data dir $d"
    rm -rf "$d" &
    continue
    ;;
  esac
  for sub in sandboxes vm/sandboxes gvisor/sandboxes; do
    for s in "$d/$sub"/*/; do
      [ -d "$s" ] || continue
      say "sandbox dir ${s%/}"
      rm -rf "$s"
    done
  done
  if [ -n "$said" ] && [ -f "$d/moat.db" ] && command -v sqlite3 >/dev/null; then
    sqlite3 "$d/moat.db" "DELETE FROM sandboxes" 2>/dev/null
  fi
done
exit 0
