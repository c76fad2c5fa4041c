#!/usr/bin/env bash
# Build libwool, make sure the Wool venvs exist, and run the Python binding's tests
# (examples/python/tests) against real workers: libwool's reference worker and real Wool
# 0.15.7 / 0.13.1 workers.
#
#   scripts/python-test.sh [PYTEST ARGS...]      e.g. -k tls, -x, -v
#
# Needs cargo, python3 >= 3.11 with venv (scripts/setup-venvs.sh) and openssl (throwaway
# test certificates, made in a temporary directory by tests/interop/make-test-certs.sh).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

if ! command -v openssl >/dev/null 2>&1; then
    echo "python-test: the openssl command is needed for the TLS tests' certificates" >&2
    exit 1
fi
cargo build
./scripts/setup-venvs.sh
# Test what `cargo build` just made, never a stale target/release build.
export LIBWOOL_PATH="$ROOT/target/debug/libwool.so"
exec target/venvs/wool-0.15.7/bin/python -m pytest examples/python/tests "$@"
