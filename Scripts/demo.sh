#!/usr/bin/env bash
# The main job, with no hardware: starts a Rootcanal virtual controller on free
# loopback ports, runs `btctl info` against it while recording the HCI session,
# decodes the recording with `btctl trace show`, and stops Rootcanal.
# (Issue 4 replaces this with `btctl demo` on the in-process virtual radio.)
set -euo pipefail
cd "$(dirname "$0")/.."
Scripts/setup.sh >/dev/null
swift build --product btctl >/dev/null
btctl=.build/debug/btctl
rootcanal=$(ls .venv/lib/python3*/site-packages/rootcanal/bin/linux-x86_64/rootcanal | head -1)
ports=$(python3 -c 'import socket
s=[socket.socket() for _ in range(4)]
[x.bind(("127.0.0.1",0)) for x in s]
print(" ".join(str(x.getsockname()[1]) for x in s))')
read -r test_port hci_port link_port ble_port <<<"$ports"
work=$(mktemp -d)
"$rootcanal" -test_port="$test_port" -hci_port="$hci_port" -link_port="$link_port" -link_ble_port="$ble_port" >"$work/rootcanal.log" 2>&1 &
rc_pid=$!
trap 'kill $rc_pid 2>/dev/null; wait $rc_pid 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 100); do
  (exec 3<>/dev/tcp/127.0.0.1/"$hci_port") 2>/dev/null && break
  sleep 0.1
done
echo "== btctl info --transport tcp:127.0.0.1:$hci_port   (Rootcanal, pid $rc_pid)"
"$btctl" info --transport "tcp:127.0.0.1:$hci_port" --btsnoop "$work/session.btsnoop"
echo
echo "== btctl trace show session.btsnoop   (the HCI conversation just recorded)"
"$btctl" trace show "$work/session.btsnoop"
