#!/bin/sh
# Regenerates Sources/HCI/AssignedNumbers+{UUIDs,Units,Companies,Appearance}.swift from the PyPI package
# bluetooth-numbers (pinned), installed in a throwaway venv. Needs python3 and PyPI.
set -eu
cd "$(dirname "$0")/.."
venv=$(mktemp -d)
trap 'rm -rf "$venv"' EXIT
python3 -m venv "$venv"
"$venv/bin/pip" install --quiet "bluetooth-numbers==1.1.2"
"$venv/bin/python" Scripts/assigned-numbers.py Sources/HCI
