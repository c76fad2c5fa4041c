#!/usr/bin/env bash
# Build libwool (its C ABI: feature `capi`) and the reference worker, make sure the Wool venvs
# exist, and run the Python binding's tests (bindings/python/tests) against real workers:
# libwool's reference worker and real Wool 0.15.7 / 0.13.1 workers. Among them
# test_install.py (marker `install`) pip-installs bindings/python into a fresh venv, which
# builds the wheel with the library bundled (setuptools-rust, from PyPI), checks that the
# bundled library is stripped, and uses it from outside the repository.
#
#   scripts/python-test.sh [PYTEST ARGS...]      e.g. -k tls, -x, -v, -m 'not install'
#
# Needs cargo, python3 >= 3.11 with venv (scripts/setup-venvs.sh), PyPI (the venvs and the
# install test's build backend) and openssl (throwaway test certificates, made in a temporary
# directory by tests/interop/make-test-certs.sh).
# Environment: SETUPTOOLS_RUST_CARGO_PROFILE, the cargo profile of the install test's wheel
# build (default dev: it reuses what the `cargo build` below made, so only the wool crate is
# compiled again); CARGO_TARGET_DIR as for cargo.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

if ! command -v openssl >/dev/null 2>&1; then
    echo "python-test: the openssl command is needed for the TLS tests' certificates" >&2
    exit 1
fi
cargo build --workspace --lib --bins --examples
./scripts/setup-venvs.sh
# Test what `cargo build` just made, never a stale target/release build nor a bundled copy
# (test_install.py unsets it for the package it installs).
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
export LIBWOOL_PATH="$TARGET_DIR/debug/libwool.so"
export WOOL_WORKER="${WOOL_WORKER:-$TARGET_DIR/debug/wool-worker}"
export SETUPTOOLS_RUST_CARGO_PROFILE="${SETUPTOOLS_RUST_CARGO_PROFILE:-dev}"
exec target/venvs/wool-0.15.7/bin/python -m pytest bindings/python/tests "$@"
