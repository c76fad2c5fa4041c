#!/usr/bin/env bash
# Runs the library under the sanitizers (nightly Rust's -Zsanitizer) and miri:
#   asan   the C harness (tests/c/, every case of tests/integration/c_api.rs) compiled with
#          -fsanitize=address against a libwool.so built with AddressSanitizer; LeakSanitizer
#          (part of ASan) checks each harness process for leaks at exit. Any report fails.
#   tsan   the Rust concurrency tests (the channel pool, 10,000 concurrent polls, the
#          completion queue, the C ABI's caller-driven runtime, rotation) under
#          ThreadSanitizer, with the standard library rebuilt instrumented (-Zbuild-std), so a
#          report is a data race in this crate or its dependencies, not in an uninstrumented std.
#   miri   the pure parts under miri (undefined behaviour, aliasing): the idle clock, the target
#          parser, the last-error buffer copy.
#
#   ./scripts/sanitizers.sh [asan] [tsan] [miri]      default: all three
#   ./scripts/sanitizers.sh build                     the three builds only, nothing run
#
# Needs: rustup (installs the nightly toolchain with rust-src and miri here if missing), a C
# compiler with -fsanitize=address (gcc's libasan), the test prerequisites of tests/integration/c_api.rs.
# Takes about 15 minutes for all three on 2 cores (most of it building with instrumentation).
# Each part builds in its own target directory (asan, tsan, miri under the builds cache of
# scripts/tools-dir.sh, ~/.cache/libwool/builds: a later run, of any clone, rebuilds only this
# workspace's crates) with line tables only for debug info; the cache is emptied past its size
# limit.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

PARTS=("${@:-asan tsan miri}")
read -r -a PARTS <<<"${PARTS[*]}"
HOST="x86_64-unknown-linux-gnu"
. "$ROOT/scripts/tools-dir.sh"
trim_builds

if ! rustup run nightly rustc --version >/dev/null 2>&1; then
    echo "sanitizers: installing the nightly toolchain (minimal profile)" >&2
    rustup toolchain install nightly --profile minimal >&2
fi
rustup component add rust-src miri --toolchain nightly >&2

# For the instrumented builds (their own target directories): line tables are enough for the
# reports' stack traces, at a fraction of the disk. Not for the stable `cargo test` of the asan
# part, which shares target/ with the rest of the suite and must not rebuild it.
# Their caches are their own target directories: no compiler wrapper (scripts/test.sh's sccache).
LEAN=(env -u RUSTC_WRAPPER CARGO_PROFILE_DEV_DEBUG=line-tables-only CARGO_PROFILE_TEST_DEBUG=line-tables-only)

status=0
run() { # name command...
    local name="$1"; shift
    echo "=== sanitizers: $name"
    if "$@"; then
        echo "=== sanitizers: $name: clean"
    else
        echo "=== sanitizers: $name: FAILED"
        status=1
    fi
}

asan() {
    local target_dir="$BUILDS_DIR/asan"
    # The library with ASan instrumentation (std as shipped: ASan needs no instrumented std).
    RUSTFLAGS="-Zsanitizer=address" "${LEAN[@]}" cargo +nightly build -p libwool-capi --lib \
        --target "$HOST" --target-dir "$target_dir" &&
        # The harness programs link that library and gcc's ASan runtime; leaks are checked at
        # each one's exit (LeakSanitizer), and any report makes it exit 23 (its test fails).
        WOOL_C_LIBRARY_DIR="$target_dir/$HOST/debug" \
            WOOL_C_FLAGS="-fsanitize=address -fno-omit-frame-pointer" \
            ASAN_OPTIONS="detect_leaks=1:exitcode=23:abort_on_error=0:detect_stack_use_after_return=1" \
            LSAN_OPTIONS="exitcode=23" \
            cargo test -p libwool --test integration -- c_api::
}

tsan() {
    # The tests' worker processes are the ordinary build's programs (built by the test
    # command's set-up): only the tests and the library need the instrumentation.
    cargo build -p wool-worker &&
        tsan_test -p libwool -p libwool-capi --lib &&
        tsan_test -p libwool --test integration -- connection:: queue:: ffi_housekeeping:: rotation::
}

tsan_test() { # cargo test arguments...
    WOOL_PROGRAM_DIR="$ROOT/target/debug" \
        RUSTFLAGS="-Zsanitizer=thread" RUSTDOCFLAGS="-Zsanitizer=thread" \
        TSAN_OPTIONS="suppressions=$ROOT/scripts/tsan.supp:second_deadlock_stack=1" \
        "${LEAN[@]}" cargo +nightly test -Zbuild-std --target "$HOST" --target-dir "$BUILDS_DIR/tsan" "$@"
}

miri() {
    # Isolation off: the idle clock reads the monotonic clock.
    MIRIFLAGS="-Zmiri-disable-isolation" "${LEAN[@]}" cargo +nightly miri test --target-dir "$BUILDS_DIR/miri" \
        -p libwool -p libwool-capi --lib -- worker::idle connection::target last_error::
}

# The three instrumented builds without running anything (scripts/test.sh makes them in the
# background ahead of the suite; the suite's own builds are then up to date).
build() {
    RUSTFLAGS="-Zsanitizer=address" "${LEAN[@]}" cargo +nightly build -p libwool-capi --lib \
        --target "$HOST" --target-dir "$BUILDS_DIR/asan" &&
        tsan_test -p libwool -p libwool-capi --lib --no-run &&
        tsan_test -p libwool --test integration --no-run &&
        MIRIFLAGS="-Zmiri-disable-isolation" "${LEAN[@]}" cargo +nightly miri test --no-run \
            --target-dir "$BUILDS_DIR/miri" -p libwool -p libwool-capi --lib
}
for part in "${PARTS[@]}"; do
    case "$part" in
        build) run "the instrumented builds only" build ;;
        asan) run "AddressSanitizer + LeakSanitizer: the C harness" asan ;;
        tsan) run "ThreadSanitizer: the concurrency tests" tsan ;;
        miri) run "miri: idle clock, target parser, last-error copy" miri ;;
        *) echo "sanitizers: unknown part $part (asan, tsan, miri, build)" >&2; exit 2 ;;
    esac
done
exit $status
