#!/usr/bin/env bash
# Create the Python virtual environments that hold the reference Wool peers used by the
# interop tests (tests/interop/*.py):
#
#   target/venvs/wool-0.15.7   wool==0.15.7 + pytest   (current: worker answers `idle`)
#   target/venvs/wool-0.13.1   wool==0.13.1            (predates `idle`: UNIMPLEMENTED)
#
#   scripts/setup-venvs.sh            both venvs
#   scripts/setup-venvs.sh 0.15.7     only the named one(s) (the demo needs only 0.15.7)
#
# Idempotent: each venv gets a marker file once its install succeeded; a re-run with the
# marker present does nothing. Needs python3 (with the venv module) and PyPI.
# Environment: PYTHON (interpreter to use, default python3; must be >= 3.11).
# Progress goes to stderr; stdout gets one line per venv: "wool VERSION: ready at DIR".
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
    if is_ready "$version" "$@"; then
        echo "wool $version: ready at $dir"
        return 0
    fi
    echo "wool $version: creating $dir" >&2
    rm -rf "$dir"
    mkdir -p "$VENVS"
    "$PYTHON" -m venv "$dir"
    "$dir/bin/python" -m pip install --quiet --disable-pip-version-check \
        "wool==$version" "$@" >&2
    # Sanity: the generated stubs and the LocalWorker must import.
    "$dir/bin/python" -c 'import wool.protocol.wire_pb2, wool.protocol.wire_pb2_grpc; from wool.runtime.worker.local import LocalWorker' >&2
    printf '%s' "$want" > "$marker"
    echo "wool $version: ready at $dir"
}

is_ready() { # version extra-packages...
    local version="$1"; shift
    local dir="$VENVS/wool-$version"
    [[ -f "$dir/.libwool-ready" && "$(cat "$dir/.libwool-ready")" == "wool==$version $*" \
        && -x "$dir/bin/python" ]]
}

# The package list of each venv this script knows.
extras() {
    case "$1" in
        0.15.7) echo pytest ;;
        0.13.1) ;;
        *) echo "setup-venvs: unknown venv $1 (known: 0.15.7 0.13.1)" >&2; return 1 ;;
    esac
}

versions=("$@")
((${#versions[@]})) || versions=(0.15.7 0.13.1)
for version in "${versions[@]}"; do
    extras "$version" >/dev/null || exit 2
done

# Fast path: all present, nothing to do.
all_ready=1
for version in "${versions[@]}"; do
    # shellcheck disable=SC2046 # the extras are words
    is_ready "$version" $(extras "$version") || all_ready=0
done
if ((all_ready)); then
    for version in "${versions[@]}"; do
        echo "wool $version: ready at $VENVS/wool-$version"
    done
    exit 0
fi

if ! "$PYTHON" -c 'import sys, venv; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    echo "setup-venvs: $PYTHON must be Python >= 3.11 with the venv module (wool needs 3.11)" >&2
    exit 1
fi

# Serialize concurrent runs (e.g. several tests calling this at once).
mkdir -p "$VENVS"
exec 9>"$VENVS/.setup.lock"
if command -v flock >/dev/null 2>&1; then
    flock 9
fi

for version in "${versions[@]}"; do
    # shellcheck disable=SC2046 # the extras are words
    setup_one "$version" $(extras "$version")
done
