#!/usr/bin/env bash
# Builds C programs OUTSIDE the repository against libwool installed into a prefix, the way a
# user would, and runs each against a real worker:
#   1. cc with `pkg-config --cflags --libs wool` (shared: libwool.so through its SONAME);
#   2. cc with `pkg-config --static --libs wool` (libwool.a; checked to need no libwool.so);
#   3. a CMake project with pkg_check_modules(WOOL REQUIRED IMPORTED_TARGET wool).
# Also checks the install itself: SONAME, symlinks, wool.pc, wool.h.
#   scripts/consumers-test.sh [PREFIX]      (default target/prefix; installed first)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PREFIX="${1:-$ROOT/target/prefix}"
cd "$ROOT"
"$ROOT/scripts/install.sh" "$PREFIX" >&2
cargo build --quiet --workspace --lib --bins --examples
export PKG_CONFIG_PATH="$PREFIX/lib/pkgconfig"
fail() { echo "consumers-test: $*" >&2; exit 1; }

# The install.
soname="$(readelf -d "$PREFIX/lib/libwool.so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')"
[[ -n "$soname" && -e "$PREFIX/lib/$soname" ]] || fail "no SONAME or no $soname in $PREFIX/lib"
[[ -f "$PREFIX/lib/libwool.a" && -f "$PREFIX/include/wool.h" ]] || fail "libwool.a or wool.h missing"
cmp -s "$PREFIX/include/wool.h" include/wool.h || fail "the installed wool.h is not include/wool.h"
version="$(pkg-config --modversion wool)"
[[ "$version" == "$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)" ]] ||
    fail "wool.pc says version $version"
echo "install: $PREFIX/lib/$(readlink "$PREFIX/lib/libwool.so") (SONAME $soname), libwool.a, wool.pc $version, wool.h"

work="$(mktemp -d)"
worker_pid=""
cleanup() { [[ -n "$worker_pid" ]] && kill "$worker_pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
cp tests/consumers/c/poll.c "$work/"
cp -r tests/consumers/cmake "$work/cmake"
cp tests/consumers/c/poll.c "$work/cmake/"

coproc WORKER { exec target/debug/wool-worker; }
worker_pid=$WORKER_PID
read -r address <&"${WORKER[0]}"

cd "$work"
# shellcheck disable=SC2046
cc -Wall -Werror poll.c $(pkg-config --cflags --libs wool) -o poll-shared
LD_LIBRARY_PATH="$PREFIX/lib" ./poll-shared "$address"
# (ldd's output is taken whole first: `grep -q` quitting early would SIGPIPE ldd under pipefail)
needs="$(ldd poll-shared)"
grep -q "$soname" <<<"$needs" || fail "poll-shared does not load $soname: $needs"

static_libs="$(pkg-config --static --libs wool | sed 's/-lwool\b/-l:libwool.a/')"
# shellcheck disable=SC2046,SC2086
cc -Wall -Werror poll.c $(pkg-config --cflags wool) $static_libs -o poll-static
needs="$(ldd poll-static)"
if grep -q libwool <<<"$needs"; then fail "poll-static still needs libwool.so: $needs"; fi
./poll-static "$address"

cmake -S cmake -B cmake/build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build cmake/build >/dev/null
LD_LIBRARY_PATH="$PREFIX/lib" cmake/build/poll "$address"
echo "consumers: pkg-config shared, pkg-config static and CMake programs polled $address"
