#!/usr/bin/env bash
# Tests the Python package integrations/libwool-kubernetes as its users have it: a fresh virtual
# environment (target/venvs/libwool-kubernetes, made anew each run), `pip install` of the
# package with wool==0.15.7 pinned, and pytest run from a directory outside the checkout (the
# tests import the installed copy and refuse the checkout's source).
#
#   scripts/kubernetes-python-test.sh [PYTEST ARGS...]      e.g. -x, -v, -k dns
#
# Needs python3 >= 3.11 (with venv) and PyPI, and cargo for the demand tests' wool-scaler (the
# workspace's debug build, made here when missing); no cluster. The workers are real Wool
# 0.15.7 workers on loopback; the DNS server and the API server are stand-ins on loopback.
# Environment: PYTHON (the interpreter for the venv, default python3).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PACKAGE="$ROOT/integrations/libwool-kubernetes"
VENV="$ROOT/target/venvs/libwool-kubernetes"
PYTHON="${PYTHON:-python3}"
RUN="$(mktemp -d)"
trap 'rm -rf "$RUN"' EXIT

(cd "$ROOT" && cargo build --quiet -p wool-scaler)
# Built from a copy, so that the build leaves nothing (build/, *.egg-info) in the checkout.
cp -r "$PACKAGE" "$RUN/package"
rm -rf "$RUN/package/tests"
"$PYTHON" -m venv --clear "$VENV"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
    "$RUN/package" "wool==0.15.7" "pytest==9.2.0"

mkdir "$RUN/cwd"
cd "$RUN/cwd"
echo "kubernetes-python-test: one case alone, after this run made the venv:" >&2
echo "  (cd /tmp && $VENV/bin/python -m pytest '$PACKAGE/tests/test_sigterm.py::test_entrypoint_drains_on_sigterm')" >&2
"$VENV/bin/python" -m pytest -p no:cacheprovider "$PACKAGE/tests" "$@"
