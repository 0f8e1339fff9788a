#!/bin/sh
# Man pages for btctl, one per command, generated from its argument definitions by
# swift-argument-parser's generate-manual into docs/man/ (committed).
#   Scripts/man.sh           regenerate docs/man
#   Scripts/man.sh --check   fail when docs/man differs from the current definitions
# Read one with `man -l docs/man/btctl.scan.1`; install with
#   sudo install -m 644 docs/man/*.1 /usr/local/share/man/man1/
set -eu
cd "$(dirname "$0")/.."
swift build --product btctl >/dev/null
swift build --product generate-manual >/dev/null
bin=$(swift build --show-bin-path)
out=docs/man
if [ "${1:-}" = "--check" ]; then out=$(mktemp -d); else rm -rf docs/man; mkdir -p docs/man; fi
# A fixed date keeps the pages byte-identical between runs.
"$bin/generate-manual" "$bin/btctl" --multi-page --date 2026-11-24 --section 1 --authors "the swift-ble-host authors" --output-directory "$out"
if [ "${1:-}" = "--check" ]; then
  if ! diff -r docs/man "$out" >/dev/null; then
    diff -r docs/man "$out" | head -20
    rm -rf "$out"
    echo "man: docs/man is out of date: run Scripts/man.sh" >&2
    exit 1
  fi
  rm -rf "$out"
  echo "man: docs/man matches btctl's argument definitions"
fi
