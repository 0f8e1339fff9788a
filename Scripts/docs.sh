#!/usr/bin/env bash
# Builds the BLE module's DocC catalog (Sources/BLE/BLE.docc) with the toolchain's
# docc, failing on any warning (a broken symbol link, a missing article).
# Output: .build/BLE.doccarchive (open with `docc preview` or any static server).
set -euo pipefail
cd "$(dirname "$0")/.."
graphs=.build/symbol-graphs
rm -rf "$graphs" && mkdir -p "$graphs/all" "$graphs/BLE"
build_graphs() { swift build --target BLE -Xswiftc -emit-symbol-graph -Xswiftc -emit-symbol-graph-dir -Xswiftc "$PWD/$graphs/all" >/dev/null; }
build_graphs
# A build with nothing to compile emits no symbol graph: make BLE compile again.
if [ ! -f "$graphs/all/BLE.symbols.json" ]; then touch Sources/BLE/Exports.swift; build_graphs; fi
cp "$graphs/all"/BLE.symbols.json "$graphs/BLE/"
docc convert Sources/BLE/BLE.docc --additional-symbol-graph-dir "$graphs/BLE" \
  --fallback-display-name BLE --fallback-bundle-identifier org.swift-ble-host.BLE \
  --warnings-as-errors --output-path .build/BLE.doccarchive >/dev/null
echo "docs: .build/BLE.doccarchive"
