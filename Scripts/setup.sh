#!/usr/bin/env bash
# Installs what building and testing need, on Debian or Ubuntu with Swift installed.
# Idempotent: installs only what is missing.
#   - libbluetooth-dev (headers for CBlueZ), tshark (independent decoder for our traces)
#   - .venv: Python venv with rootcanal==1.10.0 (virtual controller) and bumble (peer host)
set -euo pipefail
cd "$(dirname "$0")/.."

sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi

need=()
[ -f /usr/include/bluetooth/hci.h ] || need+=(libbluetooth-dev)
command -v tshark >/dev/null 2>&1 || need+=(tshark)
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || need+=(python3-venv)
if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing ${need[*]}"
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

if ! .venv/bin/python -c 'import bumble, rootcanal' >/dev/null 2>&1; then
  echo "setup: creating .venv with rootcanal==1.10.0 and bumble"
  rm -rf .venv
  python3 -m venv .venv
  .venv/bin/pip install -q --disable-pip-version-check 'rootcanal==1.10.0' bumble
fi
rc=$(ls .venv/lib/python3*/site-packages/rootcanal/bin/linux-x86_64/rootcanal 2>/dev/null | head -1)
if [ -z "$rc" ]; then
  echo "setup: rootcanal binary missing from .venv (rootcanal 1.10.0 ships a linux-x86_64 binary only)" >&2
  exit 1
fi
echo "setup: ready (rootcanal: $rc)"
