#!/usr/bin/env bash
# Runs every fuzz target in fuzz/ (cargo-fuzz: libFuzzer with AddressSanitizer, nightly Rust)
# for a bounded time each, on its committed corpus (fuzz/corpus/<target>/), and prints one
# line per target: executions, seconds, coverage, corpus size and whether it found a crash.
#
#   ./scripts/fuzz.sh [SECONDS] [TARGET...]      default: 60 s each, every target
#   FUZZ_MINIMISE=1 ./scripts/fuzz.sh 600        then minimise each corpus (cargo fuzz cmin)
#   ./scripts/fuzz.sh build                      only the instrumented build (scripts/test.sh
#                                                makes it in the background ahead of the suite)
#
# The targets (see each file's doc comment): target_parse, credentials_pem, c_api (the C ABI
# driven by arbitrary calls), authority (the worker's Unix-socket :authority rewriter), dispatch
# (the worker's dispatch handling of arbitrary request bodies), scaler_metadata (the scaler's
# scalerMetadata reader on any map of strings). A crash leaves its input in
# fuzz/artifacts/<target>/ and fails the script; each one found becomes a regression test in
# the normal suite, beside the code it broke (a unit test, or a case of the C harness), and its
# input joins the corpus.
# Needs: rustup with a nightly toolchain (installed here if missing, minimal profile), cargo-fuzz
# (installed with cargo install if missing), a C++ compiler (libFuzzer is built from source).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT/fuzz"
# The instrumented build's cache is its target directory below: no compiler wrapper (scripts/test.sh's sccache).
unset RUSTC_WRAPPER

SECONDS_EACH="${1:-60}"
shift || true
ALL=(target_parse credentials_pem c_api authority dispatch scaler_metadata)
TARGETS=("${@:-${ALL[@]}}")

if ! rustup run nightly rustc --version >/dev/null 2>&1; then
    echo "fuzz: installing the nightly toolchain (minimal profile)" >&2
    rustup toolchain install nightly --profile minimal >&2
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz: installing cargo-fuzz" >&2
    cargo install cargo-fuzz --locked >&2
fi

# The instrumented build lives in the builds cache (scripts/tools-dir.sh), reused by later runs.
. "$ROOT/scripts/tools-dir.sh"
trim_builds
FUZZ_TARGET_DIR="$BUILDS_DIR/fuzz"
cargo +nightly fuzz build --target-dir "$FUZZ_TARGET_DIR" >&2
[[ "$SECONDS_EACH" != build ]] || exit 0
status=0
for target in "${TARGETS[@]}"; do
    corpus="corpus/$target"
    mkdir -p "$corpus" "artifacts/$target"
    log="$(mktemp)"
    started=$(date +%s%N)
    # Inputs found go to a scratch directory beside the committed corpus, so a short run
    # (CI's) leaves the committed corpus as it is; FUZZ_MINIMISE merges them back, minimised.
    scratch="$(mktemp -d)"
    if cargo +nightly fuzz run --target-dir "$FUZZ_TARGET_DIR" "$target" "$scratch" "$corpus" -- \
        -max_total_time="$SECONDS_EACH" -timeout=20 -rss_limit_mb=4096 \
        -print_final_stats=1 >"$log" 2>&1; then
        outcome="no crash"
        crashed=0
    else
        outcome="CRASH (see fuzz/artifacts/$target/ and the log below)"
        crashed=1
        status=1
        tail -n 60 "$log"
    fi
    elapsed_ms=$((($(date +%s%N) - started) / 1000000))
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n 1 | grep -o '[0-9]*' || echo "?")
    found=$(find "$scratch" -type f | wc -l)
    if [[ "${FUZZ_MINIMISE:-0}" == 1 && $crashed == 0 ]]; then
        cp -n "$scratch"/* "$corpus"/ 2>/dev/null || true
        cargo +nightly fuzz cmin --target-dir "$FUZZ_TARGET_DIR" "$target" "$corpus" >/dev/null 2>&1 ||
            echo "fuzz: cmin of $target failed" >&2
    fi
    printf 'fuzz %-16s %10s execs in %4d.%03d s, coverage %5s, corpus %4d (+%d new): %s\n' \
        "$target" "$runs" $((elapsed_ms / 1000)) $((elapsed_ms % 1000)) "$cov" \
        "$(find "$corpus" -type f | wc -l)" "$found" "$outcome"
    rm -rf "$scratch" "$log"
done
exit $status
