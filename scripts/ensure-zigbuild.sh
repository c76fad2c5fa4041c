#!/usr/bin/env bash
# Makes sure the release build's cross tools are ready, and prints ONE directory to prepend to
# PATH (the only output on stdout):
#   PATH="$(scripts/ensure-zigbuild.sh):$PATH"
# That directory holds exactly:
#   zig             Zig 0.17.0, from the `ziglang` package on PyPI (pinned): the C compiler and
#                   linker for both arches and the glibc 2.17 stubs (`zig cc -target
#                   aarch64-linux-gnu.2.17` works as a cross C compiler too)
#   cargo-zigbuild  cargo-zigbuild 0.24.0, from PyPI (pinned): `cargo zigbuild --target
#                   <arch>-unknown-linux-gnu.2.17` links against glibc 2.17's symbol versions
#   llvm-strip      from rustup's `llvm-tools` component (the LLVM of the pinned rustc): strips
#   llvm-objdump    and reads ELF files of either arch (x86_64, aarch64)
# and nothing else (no python, no pip: it does not shadow anything on PATH).
# Also adds the rustup targets the release needs: aarch64-unknown-linux-gnu (x86_64 is the host).
# Both PyPI packages live in one virtual environment under <tools>/zigbuild-<zig>-<zigbuild>
# (<tools>: scripts/tools-dir.sh), so a second run only checks versions. Needs python3 (venv),
# network to PyPI and the Rust toolchain's downloads the first time.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ZIG_VERSION=0.17.0
ZIGBUILD_VERSION=0.24.0
TARGETS=(aarch64-unknown-linux-gnu x86_64-unknown-linux-gnu)
. "$ROOT/scripts/tools-dir.sh"
HOME_DIR="$TOOLS_DIR/zigbuild-$ZIG_VERSION-$ZIGBUILD_VERSION"
VENV="$HOME_DIR/venv"
BIN="$HOME_DIR/bin"
STAMP="$HOME_DIR/.installed"
log() { echo "ensure-zigbuild: $*" >&2; }

if [[ ! -f "$STAMP" ]]; then
    log "installing ziglang==$ZIG_VERSION and cargo-zigbuild==$ZIGBUILD_VERSION into $VENV"
    rm -rf "$HOME_DIR"
    mkdir -p "$HOME_DIR"
    python3 -m venv "$VENV" >&2
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check \
        "ziglang==$ZIG_VERSION" "cargo-zigbuild==$ZIGBUILD_VERSION" >&2
    touch "$STAMP"
fi

# The targets and llvm-tools belong to the toolchain in use, which can change between runs:
# checked every time (fast when present).
installed="$(rustup target list --installed)"
for t in "${TARGETS[@]}"; do
    grep -qx "$t" <<<"$installed" || { log "rustup target add $t"; rustup target add "$t" >&2; }
done
if ! rustup component list --installed | grep -q '^llvm-tools'; then
    log "rustup component add llvm-tools"
    rustup component add llvm-tools >&2
fi
LLVM_BIN="$(rustc --print sysroot)/lib/rustlib/$(rustc -vV | sed -n 's/^host: //p')/bin"

# The PATH directory: symlinks only, refreshed each run (the toolchain's path can change).
zig_exe="$("$VENV/bin/python" -c 'import ziglang, os; print(os.path.join(os.path.dirname(ziglang.__file__), "zig"))')"
mkdir -p "$BIN"
ln -sfn "$zig_exe" "$BIN/zig"
ln -sfn "$VENV/bin/cargo-zigbuild" "$BIN/cargo-zigbuild"
ln -sfn "$LLVM_BIN/llvm-strip" "$BIN/llvm-strip"
ln -sfn "$LLVM_BIN/llvm-objdump" "$BIN/llvm-objdump"
[[ "$("$BIN/zig" version)" == "$ZIG_VERSION" ]] || { log "zig reports $("$BIN/zig" version), not $ZIG_VERSION"; exit 1; }
"$BIN/cargo-zigbuild" --version | grep -q "$ZIGBUILD_VERSION" || { log "cargo-zigbuild is not $ZIGBUILD_VERSION"; exit 1; }
echo "$BIN"
