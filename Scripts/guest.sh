#!/usr/bin/env bash
# Runs a command inside a QEMU guest with a real Linux kernel that has Bluetooth,
# two virtual LE controllers (BlueZ's btvirt -L -l2 → hci0, hci1) that see each
# other, and this machine's root file system mounted read-only (so host-built
# binaries run as they are). Everything comes from Debian's archive and is cached
# in .cache/guest/.
#
#   Scripts/guest.sh build                 build (or reuse) kernel + initramfs
#   Scripts/guest.sh run 'CMD'             run CMD (bash, in the project dir) in the guest;
#                                          exit status and console output are CMD's
#   Scripts/guest.sh available             exit 0 if QEMU and the kernel can be provided
#
# Facts this relies on (DESIGN.md): TCG only (KVM hangs here), -smp 1, Debian's
# linux-image-6.12.*+deb12-amd64 (6.1 kernels fail their ecdh self-test under TCG).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
cache="$root/.cache/guest"
mkdir -p "$cache"
sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"

ensure_packages() {
  local need=()
  command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
  command -v btvirt >/dev/null || [ -x /usr/bin/btvirt ] || need+=(bluez-test-tools)
  [ -x /bin/busybox ] && /bin/busybox --list | grep -qx insmod || need+=(busybox-static)
  command -v depmod >/dev/null || [ -x /sbin/depmod ] || need+=(kmod)
  command -v cpio >/dev/null || need+=(cpio)
  command -v xz >/dev/null || need+=(xz-utils)
  if [ ${#need[@]} -gt 0 ]; then
    echo "guest: installing ${need[*]}" >&2
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  fi
}

build() {
  ensure_packages
  if [ -f "$cache/vmlinuz" ] && [ -f "$cache/initramfs.gz" ] && [ "$cache/initramfs.gz" -nt Scripts/guest/init ]; then return; fi
  local pkg
  pkg=$(apt-cache search --names-only '^linux-image-6\.12\.[0-9]+\+deb12-amd64$' | awk '{print $1}' | sort -V | tail -1)
  [ -n "$pkg" ] || { echo "guest: no linux-image-6.12.*+deb12-amd64 in the apt sources" >&2; exit 1; }
  echo "guest: building from $pkg" >&2
  local work="$cache/work"
  rm -rf "$work"; mkdir -p "$work/deb" "$work/initramfs/bin" "$work/initramfs/lib/modules"
  if ! ls "$cache"/"$pkg"_*.deb >/dev/null 2>&1; then
    (cd "$cache" && apt-get download "$pkg" 2>/dev/null)
  fi
  dpkg-deb -x "$(ls "$cache"/"$pkg"_*.deb | tail -1)" "$work/deb"
  local kver; kver=$(ls "$work/deb/lib/modules")
  /sbin/depmod -b "$work/deb" "$kver"
  local mdir="$work/deb/lib/modules/$kver"
  # The dependency closure of what we load, in load order.
  local order=()
  add() {
    local m=$1 path deps d
    for d in "${order[@]:-}"; do [ "$d" = "$m" ] && return; done
    path=$(grep -E "/$m\.ko(\.xz)?:" "$mdir/modules.dep" | head -1) || true
    [ -n "$path" ] || return 0   # built in
    deps=${path#*:}
    for d in $deps; do d=$(basename "$d"); add "${d%%.ko*}"; done
    local file=${path%%:*}
    case "$file" in
      *.xz) xz -dc "$mdir/$file" > "$work/initramfs/lib/modules/$m.ko" ;;
      *) cp "$mdir/$file" "$work/initramfs/lib/modules/$m.ko" ;;
    esac
    order+=("$m")
  }
  # btvirt needs AF_ALG with ecb(aes) and cmac(aes): without them it fails with a misleading
  # "Failed to open Virtual HCI device".
  for m in 9pnet_virtio 9p af_alg algif_skcipher algif_hash aes_generic ecb cmac bluetooth hci_vhci; do add "$m"; done
  printf '%s\n' "${order[@]}" > "$work/initramfs/lib/modules/order"
  cp /bin/busybox "$work/initramfs/bin/busybox"
  cp Scripts/guest/init "$work/initramfs/init"
  chmod +x "$work/initramfs/init"
  (cd "$work/initramfs" && find . | cpio -o -H newc --quiet | gzip -1) > "$cache/initramfs.gz"
  cp "$work/deb/boot/vmlinuz-$kver" "$cache/vmlinuz"
  echo "$kver" > "$cache/kernel-version"
  rm -rf "$work"
}

run() {
  build
  local cmd="$1"
  # The guest runs this from the host tree (read-only), in the project directory.
  cat > "$cache/cmd.sh" <<EOS
set -u
cd "$root"
export HOME=/dev/shm TMPDIR=/dev/shm PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export BLE_GUEST=1
if [ "${GUEST_BTVIRT-on}" != off ]; then
btvirt -L -l2 >/dev/shm/btvirt.log 2>&1 &
for i in \$(seq 100); do [ -e /sys/class/bluetooth/hci1 ] && break; sleep 0.1; done
[ -e /sys/class/bluetooth/hci1 ] || { echo "GUEST: btvirt made no hci1"; cat /dev/shm/btvirt.log; ls -la /dev/vhci; cut -d' ' -f1 /proc/modules | tr '\\n' ' '; dmesg | tail -15; exit 124; }
sleep 3   # the kernel's own setup of the new adapters (HCI_SETUP, auto power-off)
fi
$cmd
EOS
  local log="$cache/console.log"
  timeout "${GUEST_TIMEOUT:-900}" qemu-system-x86_64 -accel tcg -smp 1 -m 2048 -nographic -no-reboot \
    -kernel "$cache/vmlinuz" -initrd "$cache/initramfs.gz" \
    -append "console=ttyS0 quiet loglevel=3 panic=-1 guestdir=$cache" \
    -virtfs "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap" \
    -nic none </dev/null 2>&1 | tee "$log" | grep -v '^GUEST-EXIT-STATUS' | tr -d '\r' || true
  local status
  status=$(tr -d '\r' < "$log" | sed -n 's/^GUEST-EXIT-STATUS: //p' | tail -1)
  [ -n "$status" ] || { echo "guest: no exit status (guest crashed or timed out); console in $log" >&2; return 125; }
  return "$status"
}

case "${1:-}" in
  build) build ;;
  run) shift; run "$*" ;;
  available)
    [ "$(uname -m)" = x86_64 ] && { command -v qemu-system-x86_64 >/dev/null || apt-cache show qemu-system-x86 >/dev/null 2>&1; } ;;
  *) sed -n '2,16p' "$0"; exit 2 ;;
esac
