#!/usr/bin/env bash
# The kernel tests (Tests/TransportsTests/KernelTests.swift) inside the QEMU guest:
# once as root, once as an unprivileged user; plus the btctl output shown in
# docs/real-linux.md. Assumes `swift build --build-tests` has run.
set -euo pipefail
cd "$(dirname "$0")/.."
xctest=$(ls -d .build/debug/*PackageTests.xctest | head -1)
Scripts/guest.sh run "
set -e
$xctest --testing-library swift-testing --filter KernelTests
BLE_GUEST_UNPRIVILEGED=1 setpriv --reuid=65534 --regid=65534 --clear-groups $xctest --testing-library swift-testing --filter KernelTests
echo '== btctl list'; .build/debug/btctl list
echo '== btctl info --transport hci0'; .build/debug/btctl info --transport hci0
"
