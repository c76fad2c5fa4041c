#!/usr/bin/env bash
# Installs libwool as a C library with cargo-c (`cargo cinstall`), its C ABI package (capi/, `libwool-capi`):
#   PREFIX/lib/libwool.so.X.Y.Z (SONAME libwool.so.X.Y for 0.x), its symlinks, libwool.a,
#   PREFIX/lib/pkgconfig/wool.pc, PREFIX/include/wool.h (the checked-in cbindgen header).
#
#   scripts/install.sh PREFIX [cargo cinstall flags...]    e.g. --release, --destdir DIR
#
# Needs cargo-c (scripts/ensure-cargo-c.sh installs the pinned version).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PREFIX="${1:?usage: scripts/install.sh PREFIX [cargo cinstall flags...]}"
shift
mkdir -p "$PREFIX"
PREFIX="$(cd "$PREFIX" && pwd)"
cd "$ROOT"
"$ROOT/scripts/ensure-cargo-c.sh" >&2
exec cargo cinstall --locked -p libwool-capi --prefix "$PREFIX" --libdir lib "$@"
