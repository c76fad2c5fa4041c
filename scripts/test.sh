#!/usr/bin/env bash
# Runs every test of libwool on a fresh machine: sets up what the tests need (the pinned Wool
# virtual environments, Go modules, nightly Rust and cargo-fuzz for the fuzz and sanitizer
# suites), then runs each suite and prints a summary line.
#   ./scripts/test.sh            everything
# Environment: CARGO_TEST_ARGS (extra args for `cargo test`, e.g. a test-name filter).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

passed=0
failed=0
failures=()
suite() { # name command...
    local name="$1"; shift
    echo "=== $name: $*"
    if "$@"; then
        passed=$((passed + 1))
    else
        failed=$((failed + 1))
        failures+=("$name")
    fi
}

setup() {
    ./scripts/setup-venvs.sh &&
        # cargo-c installs the library for the consumer suites (built once: 18-51 min on 2 cores).
        ./scripts/ensure-cargo-c.sh &&
        # grpcurl, the real reflection client of tests/integration/operable.rs (go install, pinned).
        ./scripts/ensure-grpcurl.sh >/dev/null &&
        # KEDA's own external-scaler client (tests/keda, pinned), which tests/integration/scaler.rs drives
        # wool-scaler with.
        ./scripts/ensure-keda-client.sh >/dev/null &&
        # The C, Go and Python suites load libwool (with its C ABI, the `capi` feature) and run
        # wool-worker: build them first.
        cargo build --workspace --lib --bins --examples
}

# On CI the tests that need root (network namespaces for cut links and multicast) and the Wool
# peers fail rather than skip when they cannot run.
if [[ -n "${CI:-}" ]]; then
    export WOOL_TEST_REQUIRE_NETNS="${WOOL_TEST_REQUIRE_NETNS:-1}"
fi

suite "setup (Wool venvs, build)" setup
# Rust unit, integration, interop (real Wool), C harness and header tests.
# shellcheck disable=SC2086
suite "cargo test" cargo test --workspace --lib --bins --tests --examples ${CARGO_TEST_ARGS:-}
suite "doc tests" cargo test --workspace --doc
suite "rustfmt (cargo fmt --check)" cargo fmt --check
suite "import cycles: none between files of src/ or capi/src/" sh -c 'python3 scripts/import-cycles.py src && python3 scripts/import-cycles.py capi/src'
suite "clippy (warnings denied)" cargo clippy --workspace --all-targets -- -D warnings
suite "packages: each library as packaged, each package and feature alone, the client's crates" ./scripts/packages.sh
suite "rustdoc (warnings denied)" env RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --workspace
suite "C harness under valgrind" ./scripts/valgrind-c.sh
suite "C consumers of the installed library (pkg-config, CMake)" ./scripts/consumers-test.sh
suite "Go binding (go test -race)" ./scripts/go-test.sh
suite "Python binding (pytest)" ./scripts/python-test.sh -q
# What users install: dist/ built for x86_64 and aarch64 (glibc 2.17), each artifact installed
# outside the checkout with no Rust on PATH and run against a worker (aarch64 under qemu).
release() { ./scripts/release.sh && ./scripts/release-test.sh; }
suite "release: dist/ built, each artifact installed and run with no Rust on PATH" release
# Breaking it on purpose, in short forms (the long ones: docs/testing.md, "Breaking it on purpose").
suite "hostile input: every fuzz target, 10 s each" ./scripts/fuzz.sh 10
suite "sanitizers: ASan+LSan C harness, TSan concurrency tests, miri" ./scripts/sanitizers.sh
suite "soak: C API vs a worker SIGKILLed every 10 s (2 min)" ./scripts/soak.sh 2
suite "images: wool-worker and wool-scaler built FROM scratch (static musl binaries, buildah)" ./scripts/images.sh
suite "images: each root filesystem run as UID 65532, polled and stopped from the host" ./scripts/images-test.sh
suite "Helm chart: lint, template of every documented combination, bad values refused" ./scripts/helm-test.sh
suite "Kubernetes: the chart's manifests on kube-apiserver v1.36.3 with KEDA v2.21.0 (engine built once, ~13 min)" ./scripts/e2e-kubernetes.sh

echo
if ((failed)); then
    echo "failed suites: ${failures[*]}"
fi
echo "suites: $passed passed, $failed failed"
((failed == 0))
