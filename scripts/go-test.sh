#!/usr/bin/env bash
# Runs the Go binding's tests (examples/go) with the race detector against real workers.
#   ./scripts/go-test.sh [go test flags...]     e.g. -run TestMutualTLS -v
# Builds what they need first: libwool and wool-worker (`cargo build`, debug) and the pinned
# Wool virtual environments (scripts/setup-venvs.sh; idempotent) for the tests that talk to
# real Wool Python workers. With WOOL_TEST_REQUIRE_PEERS=1 (the default here) a missing venv
# fails those tests instead of skipping them.
# Needs: cargo, go (>= 1.24) with cgo enabled and a C compiler, python3 >= 3.11 (for the venvs).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

if ! command -v go >/dev/null 2>&1; then
    echo "go-test: the Go toolchain (go >= 1.24) is not on PATH" >&2
    exit 1
fi
cargo build --lib --bin wool-worker
./scripts/setup-venvs.sh >/dev/null

cd examples/go
export CGO_ENABLED=1 WOOL_TEST_REQUIRE_PEERS="${WOOL_TEST_REQUIRE_PEERS:-1}"
go vet ./...
unformatted="$(gofmt -l .)"
if [[ -n "$unformatted" ]]; then
    echo "go-test: not gofmt-formatted:" "$unformatted" >&2
    exit 1
fi
go test -race -count=1 "$@" ./...
