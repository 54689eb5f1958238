#!/bin/bash
# measure-volume-fs.sh — throughput of the ways a Moat volume can reach a
# sandbox (docs/volumes-and-secrets.md, "Measurements"). Not run by CI.
#
# Boots a throw-away TCG microVM (QEMU microvm, as Moat does) from a busybox
# initramfs per case and runs the same workload in the guest on:
#   blk       an ext4 image as a raw virtio-blk disk (cache=writeback)
#   vfs-*     virtiofs: /usr/lib/qemu/virtiofsd exporting an ext4 image
#             loop-mounted on the host (vhost-user-fs-device, shared memory)
#   9p-*      virtio-9p of the same loop mount (virtio-9p-device) — needs a
#             kernel with 9p: the Debian cloud kernel Moat boots has none, so
#             9p runs use the generic Debian kernel (GENERIC_ROOT, see below)
# and on the host (the container side) on the loop-mounted ext4 image.
#
# Usage (root):  flock -o /tmp/moat-e2e.lock scripts/measure-volume-fs.sh [case...]
#   WORK=/tmp/moat-volfs   scratch directory (removed at the end)
#   GENERIC_ROOT=DIR       `dpkg-deb -x linux-image-<abi>-amd64_*.deb DIR` (for 9p and
#                          the generic-kernel cases); cases needing it are skipped without
#   SIZE_MIB=256 FILES=2000 VCPUS=2 MEM=512
# Output: one line per case: seq write/read MiB/s, small-file create/untar/read/rm seconds.
set -euo pipefail

WORK=${WORK:-/tmp/moat-volfs}
SIZE_MIB=${SIZE_MIB:-256}
FILES=${FILES:-2000}
VCPUS=${VCPUS:-2}
MEM=${MEM:-512}
QEMU=${QEMU:-qemu-system-x86_64}
VIRTIOFSD=${VIRTIOFSD:-/usr/lib/qemu/virtiofsd}
CASES=("$@")
[ ${#CASES[@]} -gt 0 ] || CASES=(host blk vfs-auto vfs-none vfs-always 9p-none 9p-loose gen-blk gen-vfs-auto)

CLOUD_K=$(ls /boot/vmlinuz-*-cloud-amd64 | sort | tail -1)
CLOUD_V=${CLOUD_K#/boot/vmlinuz-}
TSC_KHZ=$(awk -F: '/cpu MHz/ {printf "%d", $2*1000; exit}' /proc/cpuinfo)

rm -rf "$WORK" && mkdir -p "$WORK"
cleanup() {
	set +e
	for p in "$WORK"/*.pid; do [ -f "$p" ] && kill "$(cat "$p")" 2>/dev/null; done
	mountpoint -q "$WORK/mnt" && umount "$WORK/mnt"
	[ -n "${KEEP:-}" ] || rm -rf "$WORK"
}
trap cleanup EXIT

# The workload, run by busybox sh in the guest and on the host. $1 = mount point.
cat >"$WORK/work.sh" <<EOF
M=\$1
now() { read u _ </proc/uptime; echo \$u; }
dropc() { sync; echo 3 >/proc/sys/vm/drop_caches 2>/dev/null; }
el() { awk "BEGIN{printf \"%.2f\", \$2-\$1}"; }
rate() { awk "BEGIN{d=\$2-\$1; if (d<=0) d=0.01; printf \"%.1f\", $SIZE_MIB/d}"; }
D=\$(head -c 4096 /dev/zero | tr '\\\\0' x)
mkdir -p /tmp/src && cd /tmp/src && i=0
while [ \$i -lt $FILES ]; do printf %s "\$D" >f\$i; i=\$((i+1)); done
tar cf /tmp/s.tar . && cd / && rm -rf /tmp/src
dropc; a=\$(now); dd if=/dev/zero of=\$M/big bs=1M count=$SIZE_MIB conv=fsync 2>/dev/null; b=\$(now); W=\$(rate \$a \$b)
dropc; a=\$(now); dd if=\$M/big of=/dev/null bs=1M 2>/dev/null; b=\$(now); R=\$(rate \$a \$b)
rm -f \$M/big; mkdir \$M/c; cd \$M/c
a=\$(now); i=0; while [ \$i -lt $FILES ]; do printf %s "\$D" >f\$i; i=\$((i+1)); done; sync; b=\$(now); C=\$(el \$a \$b); cd /
mkdir \$M/u; a=\$(now); tar xf /tmp/s.tar -C \$M/u; sync; b=\$(now); U=\$(el \$a \$b)
dropc; a=\$(now); cat \$M/u/* >/dev/null; b=\$(now); RS=\$(el \$a \$b)
a=\$(now); rm -rf \$M/c \$M/u; sync; b=\$(now); X=\$(el \$a \$b)
echo "RESULT write=\${W}MiB/s read=\${R}MiB/s create${FILES}=\${C}s untar=\${U}s readsmall=\${RS}s rm=\${X}s"
EOF

# initramfs <kver> <moddir> <out> <modules...>: busybox, the modules' dependency closure, /init.
initramfs() {
	local v=$1 md=$2 out=$3; shift 3
	local r="$WORK/rootfs-$v"
	rm -rf "$r" && mkdir -p "$r"/{bin,proc,sys,dev,mnt,tmp,lib/modules}
	cp /usr/bin/busybox "$r/bin/busybox"
	for a in sh mount umount mkdir cat echo dd sync awk head tr tar rm printf reboot insmod sleep ls cut grep; do ln -sf busybox "$r/bin/$a"; done
	cp "$WORK/work.sh" "$r/work.sh"
	local order="" m
	for m in "$@"; do order="$order $(modclosure "$md" "$m")"; done
	: >"$r/modules"
	for m in $order; do
		grep -qxF "$m" "$r/modules" && continue
		echo "$m" >>"$r/modules"
		mkdir -p "$r/lib/modules/$(dirname "$m")" && cp "$md/$m" "$r/lib/modules/$m"
	done
	cat >"$r/init" <<'EOF'
#!/bin/sh
mount -t proc p /proc; mount -t sysfs s /sys; mount -t devtmpfs d /dev; mount -t tmpfs t /tmp
for m in $(cat /modules); do insmod /lib/modules/$m 2>/dev/null; done
set -- $(cat /proc/cmdline)
for a; do case $a in vt.fs=*) FS=${a#vt.fs=};; vt.opt=*) OPT=${a#vt.opt=};; esac; done
case $FS in
blk) mount -t ext4 /dev/vda /mnt ;;
9p) mount -t 9p -o trans=virtio,version=9p2000.L,$OPT vol /mnt ;;
virtiofs) mount -t virtiofs vol /mnt ;;
esac || echo "RESULT mount failed"
mountpoint /mnt >/dev/null 2>&1 || grep -q ' /mnt ' /proc/mounts || echo "RESULT not mounted"
sh /work.sh /mnt
sync; umount /mnt; reboot -f
EOF
	chmod +x "$r/init"
	(cd "$r" && find . | cpio -o -H newc --quiet >"$out")
}

# modclosure <moddir> <name>: the module's path and its dependencies', dependencies first.
modclosure() {
	local md=$1 n=$2 line p deps d
	line=$(grep -E "(^|/)${n}\.ko(\.xz|\.zst)?:" "$md/modules.dep" || true)
	[ -n "$line" ] || return 0 # built in
	p=${line%%:*}; deps=${line#*:}
	# modules.dep lists the whole closure, innermost last
	local rev=""; for d in $deps; do rev="$d $rev"; done
	echo "$rev $p"
}

mkimage() { # a fresh 1 GiB ext4 image
	rm -f "$WORK/vol.img"
	truncate -s 1G "$WORK/vol.img"
	mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0 "$WORK/vol.img"
}

boot() { # boot <kernel> <initramfs> <kernel args> <qemu device args...>
	local k=$1 i=$2 extra=$3; shift 3
	rm -f "$WORK/console.log"
	timeout "${BOOT_TIMEOUT:-900}" "$QEMU" -nodefaults -no-user-config -display none -no-reboot \
		-accel tcg,tb-size=128 -cpu max -smp "$VCPUS" -m "$MEM" \
		-object "memory-backend-file,id=mem0,size=${MEM}M,mem-path=$WORK/guestmem,share=on" \
		-M microvm,memory-backend=mem0 -serial "file:$WORK/console.log" \
		-kernel "$k" -initrd "$i" \
		-append "console=ttyS0 quiet panic=-1 reboot=t rdinit=/init mitigations=off no_timer_check tsc_early_khz=$TSC_KHZ $extra" \
		"$@" >"$WORK/qemu.log" 2>&1 || true
	rm -f "$WORK/guestmem"
	grep -a RESULT "$WORK/console.log" | tr -d '\r' | head -1 || { echo "no result"; tail -5 "$WORK/console.log"; }
}

loopmount() { mkimage; mkdir -p "$WORK/mnt"; mount -o loop "$WORK/vol.img" "$WORK/mnt"; }
loopumount() { umount "$WORK/mnt"; }

virtiofsd() { # virtiofsd <cache>
	rm -f "$WORK/vfs.sock"
	"$VIRTIOFSD" --socket-path="$WORK/vfs.sock" -o source="$WORK/mnt" -o cache="$1" >"$WORK/virtiofsd.log" 2>&1 &
	echo $! >"$WORK/virtiofsd.pid"
	for _ in $(seq 50); do [ -S "$WORK/vfs.sock" ] && return 0; sleep 0.1; done
	echo "virtiofsd did not start"; cat "$WORK/virtiofsd.log"; return 1
}

VFSDEV=(-global virtio-mmio.force-legacy=false -chardev "socket,id=vfs,path=$WORK/vfs.sock" -device vhost-user-fs-device,chardev=vfs,tag=vol)
ninep() { # 9p device args, $1 = security model
	echo -fsdev "local,id=fs0,path=$WORK/mnt,security_model=$1" -device virtio-9p-device,fsdev=fs0,mount_tag=vol
}

CLOUD_MODS=(virtio_mmio virtio_blk fuse virtiofs ext4)
GEN_MODS=(virtio_mmio virtio_blk fuse virtiofs ext4 9pnet_virtio 9p)
initramfs "$CLOUD_V" "/lib/modules/$CLOUD_V" "$WORK/cloud.cpio" "${CLOUD_MODS[@]}"
GEN_K="" GEN_V=""
if [ -n "${GENERIC_ROOT:-}" ]; then
	GEN_K=$(ls "$GENERIC_ROOT"/boot/vmlinuz-* | sort | tail -1)
	GEN_V=${GEN_K##*/vmlinuz-}
	initramfs "$GEN_V" "$GENERIC_ROOT/lib/modules/$GEN_V" "$WORK/gen.cpio" "${GEN_MODS[@]}"
fi

echo "# $(date -u +%FT%TZ) $(nproc) host CPUs, load $(cut -d' ' -f1-3 /proc/loadavg); guest: TCG ${VCPUS} vCPU ${MEM} MiB; ${SIZE_MIB} MiB seq, ${FILES} x 4 KiB files"
for c in "${CASES[@]}"; do
	s=$(date +%s)
	case $c in
	host)
		loopmount; r=$(busybox sh "$WORK/work.sh" "$WORK/mnt" | grep RESULT); loopumount ;;
	blk | gen-blk)
		k=$CLOUD_K i=$WORK/cloud.cpio
		[ "$c" = gen-blk ] && { [ -n "$GEN_K" ] || { echo "$c: skipped (no GENERIC_ROOT)"; continue; }; k=$GEN_K i=$WORK/gen.cpio; }
		mkimage
		r=$(boot "$k" "$i" "vt.fs=blk" -drive "file=$WORK/vol.img,format=raw,if=none,id=d1,cache=writeback" -device virtio-blk-device,drive=d1) ;;
	vfs-* | gen-vfs-*)
		cache=${c##*vfs-} k=$CLOUD_K i=$WORK/cloud.cpio
		[ "${c#gen-}" != "$c" ] && { [ -n "$GEN_K" ] || { echo "$c: skipped (no GENERIC_ROOT)"; continue; }; k=$GEN_K i=$WORK/gen.cpio; }
		loopmount; virtiofsd "$cache"
		r=$(boot "$k" "$i" "vt.fs=virtiofs" "${VFSDEV[@]}")
		kill "$(cat "$WORK/virtiofsd.pid")" 2>/dev/null || true; wait 2>/dev/null || true; loopumount ;;
	9p-*)
		[ -n "$GEN_K" ] || { echo "$c: skipped (the cloud kernel has no 9p; set GENERIC_ROOT)"; continue; }
		cache=${c#9p-}; sm=${SECURITY_MODEL:-mapped-xattr}
		loopmount
		# shellcheck disable=SC2046
		r=$(boot "$GEN_K" "$WORK/gen.cpio" "vt.fs=9p vt.opt=msize=${MSIZE:-512000},cache=$cache" $(ninep "$sm"))
		loopumount ;;
	*) echo "$c: unknown case"; continue ;;
	esac
	echo "$c: ${r#RESULT } ($(($(date +%s) - s)) s wall)"
done
