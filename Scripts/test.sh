#!/usr/bin/env bash
# The whole test suite, from a fresh clone: installs what it needs, builds, runs the
# unit, layer, scripted, live Rootcanal and tshark tests, then a bounded fuzz run of
# every parser. Non-zero exit on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
Scripts/setup.sh
swift build --build-tests
# BLE_REQUIRE_INTEROP=1: a missing Rootcanal or tshark fails the run instead of skipping.
BLE_REQUIRE_INTEROP=1 timeout 1800 swift test --skip-build
Scripts/fuzz.sh "${FUZZ_SECONDS:-15}"
echo "test: all passed"
