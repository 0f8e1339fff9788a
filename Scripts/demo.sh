#!/usr/bin/env bash
# The main job, with no hardware: `btctl demo`, the fire-alarm sender and receiver
# on the in-process virtual radio. Installs the one build dependency (the
# libbluetooth-dev headers for CBlueZ) when it is missing. Arguments go to btctl
# demo (--json, --distance METRES, --save DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -f /usr/include/bluetooth/hci.h ]; then
  sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
  echo "demo: installing libbluetooth-dev" >&2
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libbluetooth-dev >/dev/null
fi
swift build --product btctl >&2
exec .build/debug/btctl demo "$@"
