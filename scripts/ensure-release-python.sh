#!/usr/bin/env bash
# Makes sure the Python packaging tools scripts/release.sh and scripts/release-test.sh use are
# installed, pinned, in a virtual environment under <tools>/release-python-<hash of the pins>
# (<tools>: scripts/tools-dir.sh), and prints that environment's python (the only stdout):
#   setuptools, setuptools-rust  the binding's build backend, the versions its pyproject.toml
#                                pins (the sdist and the wheels are made with them)
#   wheel                        `wheel tags`: the wheels' manylinux platform tags
#   auditwheel                   `auditwheel show`: confirms each wheel's manylinux tag
# A second run only checks the stamp. Needs python3 (venv) and PyPI the first time.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PINS=(setuptools==80.9.0 setuptools-rust==1.13.0 wheel==0.48.0 auditwheel==6.8.2)
. "$ROOT/scripts/tools-dir.sh"
key="$(printf '%s\n' "${PINS[@]}" | sha256sum | cut -c1-12)"
VENV="$TOOLS_DIR/release-python-$key"
pip_venv ensure-release-python "$VENV" "${PINS[@]}"
echo "$VENV/bin/python"
