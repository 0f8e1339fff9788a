#!/usr/bin/env bash
# The kernel tests (Tests/TransportsTests/KernelTests.swift) inside the QEMU guest:
# once as root, once as an unprivileged user; plus the btctl output shown in
# docs/real-linux.md, and btctl monitor reading the kernel's monitor channel while the
# fire-alarm session runs on two btvirt adapters. Assumes `swift build --build-tests` has run.
set -euo pipefail
cd "$(dirname "$0")/.."
xctest=$(ls -d .build/debug/*PackageTests.xctest | head -1)
Scripts/guest.sh run "
set -e
$xctest --testing-library swift-testing --filter KernelTests
BLE_GUEST_UNPRIVILEGED=1 setpriv --reuid=65534 --regid=65534 --clear-groups $xctest --testing-library swift-testing --filter KernelTests
echo '== btctl list'; .build/debug/btctl list
echo '== btctl info --transport hci0'; .build/debug/btctl info --transport hci0
# One raw command on the kernel's HCI user channel: BlueZ's emulated controller
# (btdev) answers LE Encrypt of FIPS-197's example as Rootcanal and our radio do.
echo '== btctl hci --transport hci0'
.build/debug/btctl hci --transport hci0 --reset 'Read BD_ADDR'
.build/debug/btctl hci --transport hci0 'LE Encrypt' 0f0e0d0c0b0a09080706050403020100 ffeeddccbbaa99887766554433221100 | tee /dev/shm/hci.out
grep -q 'encryptedData: 5ac5b47080b7cdd830047b6ad8e0c469' /dev/shm/hci.out
echo '== btctl hci on the kernel: ok'
echo '== the fire-alarm example on the kernel: FireAlarmSender on hci1, FireAlarmReceiver on hci0 (HCI user channel)'
# btctl monitor reads the kernel's HCI monitor channel (like btmon) while the session runs.
.build/debug/btctl monitor --json --btsnoop /dev/shm/monitor.btsnoop >/dev/shm/monitor.out 2>/dev/shm/monitor.err &
monitor=\$!
sleep 1
.build/debug/FireAlarmSender -t hci1 --name FireAlarm-guest --alarm-after 0.5 </dev/null >/dev/shm/sender.out 2>&1 &
sender=\$!
status=0
timeout 120 .build/debug/FireAlarmReceiver -t hci0 --once --scan-time 2 --name guest-receiver >/dev/shm/receiver.out 2>&1 || status=\$?
cat /dev/shm/receiver.out
kill \$sender; wait \$sender 2>/dev/null || true
cat /dev/shm/sender.out
test \$status -eq 0
grep -q 'CRC-32 ok' /dev/shm/receiver.out
grep -q 'acknowledged   guest-receiver' /dev/shm/sender.out
echo '== fire alarm on the kernel: ok'
echo '== btctl monitor on the kernel monitor channel'
kill -INT \$monitor; wait \$monitor || test \$? -eq 130
cat /dev/shm/monitor.err
grep -c '\"frame\"' /dev/shm/monitor.out
# Both adapters' traffic, the indication the sender sends and the receiver's connection.
grep -q '\"index\":0' /dev/shm/monitor.out
grep -q '\"index\":1' /dev/shm/monitor.out
grep -q 'Handle Value Indication' /dev/shm/monitor.out
grep -q 'LE Set Advertising Enable\|LE Set Extended Advertising Enable' /dev/shm/monitor.out
.build/debug/btctl trace show /dev/shm/monitor.btsnoop | grep -m3 'Handle Value'
echo '== btctl monitor on the kernel: ok'
"
