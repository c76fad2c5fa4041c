#!/usr/bin/env bash
# Create the Python virtual environments that hold the reference Wool peers used by the
# interop tests (tests/interop/*.py):
#
#   target/venvs/wool-0.15.7   wool==0.15.7 + pytest   (current: worker answers `idle`)
#   target/venvs/wool-0.13.1   wool==0.13.1            (predates `idle`: UNIMPLEMENTED)
#
# Idempotent: each venv gets a marker file once its install succeeded; a re-run with the
# marker present does nothing. Needs python3 (with the venv module) and PyPI.
# Environment: PYTHON (interpreter to use, default python3).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENVS="$ROOT/target/venvs"
PYTHON="${PYTHON:-python3}"

setup_one() {
    local version="$1"; shift
    local dir="$VENVS/wool-$version"
    # The marker records what was installed; a change of the package list redoes the venv.
    local want="wool==$version $*"
    local marker="$dir/.libwool-ready"
    if [[ -f "$marker" && "$(cat "$marker")" == "$want" && -x "$dir/bin/python" ]]; then
        echo "wool $version: ready at $dir"
        return 0
    fi
    echo "wool $version: creating $dir" >&2
    rm -rf "$dir"
    mkdir -p "$VENVS"
    "$PYTHON" -m venv "$dir"
    "$dir/bin/python" -m pip install --quiet --disable-pip-version-check \
        --upgrade pip >&2 || true
    "$dir/bin/python" -m pip install --quiet --disable-pip-version-check \
        "wool==$version" "$@" >&2
    # Sanity: the generated stubs and the LocalWorker must import.
    "$dir/bin/python" -c 'import wool.protocol.wire_pb2, wool.protocol.wire_pb2_grpc; from wool.runtime.worker.local import LocalWorker' >&2
    printf '%s' "$want" > "$marker"
    echo "wool $version: ready at $dir"
}

setup_one 0.15.7 pytest
setup_one 0.13.1
