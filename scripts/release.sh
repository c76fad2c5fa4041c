#!/usr/bin/env bash
# Builds everything a release ships into dist/ (or DIST), for x86_64 and aarch64 Linux with a
# glibc floor of 2.17 (manylinux2014), from this checkout, reproducibly:
#
#   libwool-<v>-cp39-abi3-manylinux_2_17_<arch>.manylinux2014_<arch>.whl   Python, per arch
#   libwool-<v>.tar.gz                  Python sdist: builds from source with cargo (rust/ in it)
#   libwool-<v>-<arch>-linux-gnu.tar.gz C: lib/libwool.so.<v> + SONAME links, lib/libwool.a,
#                                       include/wool.h, lib/pkgconfig/wool.pc (relocatable),
#                                       lib/cmake/wool/ (find_package(wool) -> wool::wool,
#                                       wool::wool_static), LICENSE
#   libwool-<v>.crate, libwool-capi-<v>.crate   Rust, as `cargo package` makes them
#   goproxy/                            Go: the binding as a module proxy serves it, with the
#                                       static libraries inside (scripts/release-go.sh)
#   images, chart, libwool_kubernetes wheel   Kubernetes (scripts/release-kubernetes.sh)
#   SHA256SUMS                          over every file above
#
#   scripts/release.sh [DIST]           (default: dist/ at the repository's root; emptied first)
#
# How: one `cargo zigbuild rustc` per arch of the C ABI package (capi/) makes its cdylib and
# staticlib together, profile `dist` (release without debug info), linked by Zig against
# glibc 2.17's symbol versions (scripts/ensure-zigbuild.sh: pinned ziglang and cargo-zigbuild
# from PyPI, no Docker, no system cross toolchain), SONAME libwool.so.<major>.<minor> as
# cargo-c gives it (scripts/install.sh). Staged, stripped (llvm-strip: --strip-all for the
# .so, --strip-debug for the .a), in target/release-stage/<triple>/{lib,include} (under
# $CARGO_TARGET_DIR when set), which the
# C archives, the wheels (setup.py's LIBWOOL_PREBUILT_LIBRARY: no second cargo build) and the
# Go module are all made from.
#
# Reproducible: SOURCE_DATE_EPOCH (default: the last commit's time) for every timestamp,
# archive members sorted with owner 0 and fixed modes, gzip -n, and --remap-path-prefix /
# -ffile-prefix-map so no checkout, home or cargo-registry path is inside (checked at the end).
# Two runs give identical SHA256SUMS (scripts/release-test.sh installs what this makes).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
DIST="${1:-$ROOT/dist}"
mkdir -p "$DIST"
DIST="$(cd "$DIST" && pwd)"
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
STAGE="$TARGET_DIR/release-stage"
WORK="$TARGET_DIR/release-work"
ARCHES=(x86_64 aarch64)
log() { echo "release: $*" >&2; }
die() { echo "release: FAIL: $*" >&2; exit 1; }

VERSION="$(sed -n 's/^version = "\(.*\)"/\1/p' capi/Cargo.toml | head -1)"
[[ "$VERSION" =~ ^([0-9]+)\.([0-9]+)\.([0-9]+)$ ]] || die "capi/Cargo.toml: version '$VERSION'"
# cargo-c's SONAME: lib<name>.so.<major> from 1.0 on, lib<name>.so.0.<minor> before.
MAJOR="${BASH_REMATCH[1]}" MINOR="${BASH_REMATCH[2]}"
if ((MAJOR == 0)); then SONAME="libwool.so.0.$MINOR"; else SONAME="libwool.so.$MAJOR"; fi
export SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct)}"
export TZ=UTC LC_ALL=C
umask 022
log "libwool $VERSION (SONAME $SONAME), SOURCE_DATE_EPOCH=$SOURCE_DATE_EPOCH, into $DIST"

PATH="$("$ROOT/scripts/ensure-zigbuild.sh"):$PATH"
PY="$("$ROOT/scripts/ensure-release-python.sh")"
CARGO_HOME_DIR="${CARGO_HOME:-$HOME/.cargo}"
RUSTUP_HOME_DIR="${RUSTUP_HOME:-$HOME/.rustup}"

rm -rf "${DIST:?}"/* "$STAGE" "$WORK"
mkdir -p "$STAGE" "$WORK"

# Deterministic archives: members sorted, owner root, times SOURCE_DATE_EPOCH, modes from the
# staged files (set explicitly below), gzip without name or time.
tar_gz() { # out.tar.gz dir-with-one-top-folder top-folder
    tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$SOURCE_DATE_EPOCH" \
        --format=gnu -C "$2" -cf - "$3" | gzip -9n >"$1"
}
normalize_modes() { # dir: directories and executables 0755, other files 0644
    find "$1" -type d -exec chmod 0755 {} +
    find "$1" -type f -exec chmod 0644 {} +
}

# --- the library, per arch -------------------------------------------------------------------
# Paths a build could embed (panic locations, file!(), C __FILE__), each mapped to a fixed name;
# the last matching rule wins, so the most specific come last.
RUSTFLAGS_DIST="--remap-path-prefix=$HOME=/home --remap-path-prefix=$CARGO_HOME_DIR=/cargo"
RUSTFLAGS_DIST+=" --remap-path-prefix=$RUSTUP_HOME_DIR=/rustup --remap-path-prefix=$ROOT=/libwool"
# The target directory too (build scripts' OUT_DIR, e.g. the generated protobuf code), wherever
# it is: a build in another target directory gives the same bytes.
RUSTFLAGS_DIST+=" --remap-path-prefix=$TARGET_DIR=/target"
CFLAGS_DIST="-ffile-prefix-map=$HOME=/home -ffile-prefix-map=$CARGO_HOME_DIR=/cargo -ffile-prefix-map=$ROOT=/libwool"
CFLAGS_DIST+=" -ffile-prefix-map=$TARGET_DIR=/target"
NATIVE_LIBS=""
for arch in "${ARCHES[@]}"; do
    triple="$arch-unknown-linux-gnu"
    log "$triple: cargo zigbuild rustc -p libwool-capi --profile dist (glibc 2.17)"
    start=$SECONDS
    # --print native-static-libs: what libwool.a needs linked after it (wool.pc's Libs.private,
    # the CMake static target); cargo replays the note when the crate is fresh.
    RUSTFLAGS="$RUSTFLAGS_DIST" TARGET_CFLAGS="$CFLAGS_DIST" \
        cargo-zigbuild rustc --locked -p libwool-capi --lib --profile dist \
        --target "$triple.2.17" -- -C "link-arg=-Wl,-soname,$SONAME" --print native-static-libs \
        2>"$WORK/cargo-$arch.log" || { cat "$WORK/cargo-$arch.log" >&2; die "$triple build"; }
    log "$triple: built in $((SECONDS - start)) s"
    libs="$(sed -n 's/.*note: native-static-libs: //p' "$WORK/cargo-$arch.log" | tail -1)"
    [[ -n "$libs" ]] || die "$triple: rustc printed no native-static-libs (see $WORK/cargo-$arch.log)"
    if [[ -z "$NATIVE_LIBS" ]]; then NATIVE_LIBS="$libs"
    elif [[ "$libs" != "$NATIVE_LIBS" ]]; then die "native-static-libs differ by arch: '$NATIVE_LIBS' / '$libs'"; fi
    out="$TARGET_DIR/$triple/dist"
    s="$STAGE/$triple"
    mkdir -p "$s/lib" "$s/include"
    llvm-strip --strip-all -o "$s/lib/libwool.so.$VERSION" "$out/libwool.so"
    llvm-strip --strip-debug -o "$s/lib/libwool.a" "$out/libwool.a"
    ln -s "libwool.so.$VERSION" "$s/lib/$SONAME"
    ln -s "libwool.so.$VERSION" "$s/lib/libwool.so"
    cp include/wool.h "$s/include/wool.h"
    got="$(llvm-objdump -p "$s/lib/libwool.so.$VERSION" | awk '$1 == "SONAME" {print $2}')"
    [[ "$got" == "$SONAME" ]] || die "$triple: SONAME '$got', not $SONAME"
    normalize_modes "$s"
    chmod 0755 "$s/lib/libwool.so.$VERSION"
done
# For pkg-config and CMake: "-lgcc_s -lutil ..." and "gcc_s;util;...".
NATIVE_CMAKE="$(sed 's/-l//g; s/ /;/g' <<<"$NATIVE_LIBS")"

# --- C archives ------------------------------------------------------------------------------
for arch in "${ARCHES[@]}"; do
    triple="$arch-unknown-linux-gnu"
    name="libwool-$VERSION-$arch-linux-gnu"
    d="$WORK/c-$arch/$name"
    # CMAKE_SYSTEM_PROCESSOR's names for the arch.
    if [[ $arch == aarch64 ]]; then arch_names="aarch64|arm64|ARM64"; else arch_names="x86_64|amd64|AMD64|x64"; fi
    mkdir -p "$d/lib/pkgconfig" "$d/lib/cmake/wool" "$d/include"
    cp -P "$STAGE/$triple/lib/"* "$d/lib/"
    cp "$STAGE/$triple/include/wool.h" "$d/include/"
    cp LICENSE "$d/LICENSE"
    cat >"$d/lib/pkgconfig/wool.pc" <<EOF
prefix=\${pcfiledir}/../..
exec_prefix=\${prefix}
libdir=\${exec_prefix}/lib
includedir=\${prefix}/include

Name: wool
Description: Poll Wool workers' idle time and retire them (libwool's C API)
Version: $VERSION
Libs: -L\${libdir} -lwool
Libs.private: $NATIVE_LIBS
Cflags: -I\${includedir}
EOF
    cat >"$d/lib/cmake/wool/woolConfig.cmake" <<EOF
# libwool $VERSION for $arch Linux (glibc >= 2.17), from the release archive.
#   find_package(wool ${VERSION%.*} REQUIRED)
#   target_link_libraries(app PRIVATE wool::wool)          # libwool.so ($SONAME)
#   target_link_libraries(app PRIVATE wool::wool_static)   # libwool.a and what it needs
# The archive is relocatable: every path is taken from where this file lies.
get_filename_component(_wool_prefix "\${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)
if(NOT TARGET wool::wool)
  add_library(wool::wool SHARED IMPORTED)
  set_target_properties(wool::wool PROPERTIES
    IMPORTED_LOCATION "\${_wool_prefix}/lib/libwool.so.$VERSION"
    IMPORTED_SONAME "$SONAME"
    INTERFACE_INCLUDE_DIRECTORIES "\${_wool_prefix}/include")
endif()
if(NOT TARGET wool::wool_static)
  add_library(wool::wool_static STATIC IMPORTED)
  set_target_properties(wool::wool_static PROPERTIES
    IMPORTED_LOCATION "\${_wool_prefix}/lib/libwool.a"
    IMPORTED_LINK_INTERFACE_LANGUAGES "C"
    INTERFACE_INCLUDE_DIRECTORIES "\${_wool_prefix}/include"
    INTERFACE_LINK_LIBRARIES "$NATIVE_CMAKE")
endif()
set(wool_INCLUDE_DIRS "\${_wool_prefix}/include")
set(wool_LIBRARIES wool::wool)
unset(_wool_prefix)
EOF
    cat >"$d/lib/cmake/wool/woolConfigVersion.cmake" <<EOF
# libwool $VERSION: compatible with a request for the same major version, and, while the major
# version is 0, the same minor version too (as the SONAME $SONAME says), not older than asked;
# only for 64-bit $arch Linux.
set(PACKAGE_VERSION "$VERSION")
set(PACKAGE_VERSION_COMPATIBLE FALSE)
if(NOT CMAKE_SIZEOF_VOID_P STREQUAL "8")
  set(PACKAGE_VERSION "$VERSION ($arch, 64-bit)")
  set(PACKAGE_VERSION_UNSUITABLE TRUE)
  return()
endif()
if(CMAKE_SYSTEM_PROCESSOR AND NOT CMAKE_SYSTEM_PROCESSOR MATCHES "^($arch_names)\$")
  set(PACKAGE_VERSION "$VERSION ($arch)")
  set(PACKAGE_VERSION_UNSUITABLE TRUE)
  return()
endif()
if(NOT DEFINED PACKAGE_FIND_VERSION)
  set(PACKAGE_VERSION_COMPATIBLE TRUE)
elseif(PACKAGE_FIND_VERSION_MAJOR EQUAL $MAJOR
       AND ($MAJOR GREATER 0 OR PACKAGE_FIND_VERSION_MINOR EQUAL $MINOR)
       AND NOT PACKAGE_FIND_VERSION VERSION_GREATER PACKAGE_VERSION)
  set(PACKAGE_VERSION_COMPATIBLE TRUE)
  if(PACKAGE_FIND_VERSION VERSION_EQUAL PACKAGE_VERSION)
    set(PACKAGE_VERSION_EXACT TRUE)
  endif()
endif()
EOF
    normalize_modes "$d"
    chmod 0755 "$d/lib/libwool.so.$VERSION"
    tar_gz "$DIST/$name.tar.gz" "$WORK/c-$arch" "$name"
    log "$name.tar.gz"
done

# --- Rust crates -----------------------------------------------------------------------------
# As scripts/packages.sh packs them (packages.sh also builds each as packaged); in a target
# directory of this checkout's own, not verified again here.
CARGO_TARGET_DIR="$TARGET_DIR/release-package" cargo package --quiet --locked --allow-dirty --no-verify \
    -p libwool -p libwool-capi
for crate in libwool libwool-capi; do
    cp "$TARGET_DIR/release-package/package/$crate-$VERSION.crate" "$DIST/"
done
log "libwool-$VERSION.crate, libwool-capi-$VERSION.crate"

# --- Python: sdist, then the wheels from it --------------------------------------------------
# The sdist's project: the binding's files and rust/, the two crates unpacked as packaged, in a
# workspace of their own whose Cargo.lock is the repository's, pruned to what they use.
py="$WORK/python/libwool-$VERSION"
mkdir -p "$py/rust"
cp -r bindings/python/libwool "$py/libwool"
find "$py/libwool" -name '__pycache__' -prune -exec rm -rf {} +
cp bindings/python/{setup.py,pyproject.toml,README.md,MANIFEST.in} "$py/"
cp LICENSE "$py/LICENSE"
tar -xzf "$DIST/libwool-$VERSION.crate" -C "$py/rust"
tar -xzf "$DIST/libwool-capi-$VERSION.crate" -C "$py/rust"
mv "$py/rust/libwool-$VERSION" "$py/rust/libwool"
mv "$py/rust/libwool-capi-$VERSION" "$py/rust/capi"
cat >"$py/rust/Cargo.toml" <<'EOF'
# libwool's C ABI package (capi/) and the library (libwool/), as `cargo package` packed them;
# setup.py builds capi's cdylib from here. libwool comes from libwool/, not from crates.io.
[workspace]
members = ["capi"]
resolver = "2"

[patch.crates-io]
libwool = { path = "libwool" }
EOF
cp Cargo.lock "$py/rust/Cargo.lock"
# Drops from the copied lock what these two crates do not use, every version kept as it is
# (offline: only the workspace's own entries are looked at again), then checks it is whole.
cargo update --quiet --workspace --offline --manifest-path "$py/rust/Cargo.toml"
cargo metadata --locked --format-version 1 --filter-platform x86_64-unknown-linux-gnu \
    --manifest-path "$py/rust/Cargo.toml" >/dev/null
normalize_modes "$py"
# setuptools (the binding's pinned backend) writes PKG-INFO and the egg-info; the archive is
# then made again the deterministic way.
(cd "$py" && "$PY" -c 'import sys; from setuptools import build_meta as b; b.build_sdist(sys.argv[1])' \
    "$WORK/python/sdist-raw" >"$WORK/python-sdist.log" 2>&1) ||
    { cat "$WORK/python-sdist.log" >&2; die "sdist"; }
mkdir -p "$WORK/python/sdist"
tar -xzf "$WORK/python/sdist-raw/libwool-$VERSION.tar.gz" -C "$WORK/python/sdist"
normalize_modes "$WORK/python/sdist"
tar_gz "$DIST/libwool-$VERSION.tar.gz" "$WORK/python/sdist" "libwool-$VERSION"
log "libwool-$VERSION.tar.gz (sdist)"

for arch in "${ARCHES[@]}"; do
    triple="$arch-unknown-linux-gnu"
    src="$WORK/python/wheel-$arch/libwool-$VERSION"
    mkdir -p "$src"
    cp -r "$WORK/python/sdist/libwool-$VERSION/." "$src/"
    (cd "$src" && LIBWOOL_PREBUILT_LIBRARY="$STAGE/$triple/lib/libwool.so.$VERSION" \
        LIBWOOL_PLAT_NAME="manylinux2014_$arch" \
        "$PY" -c 'import sys; from setuptools import build_meta as b; print(b.build_wheel(sys.argv[1]))' \
        "$WORK/python/wheel-$arch/out" >"$WORK/python-wheel-$arch.log" 2>&1) ||
        { cat "$WORK/python-wheel-$arch.log" >&2; die "wheel $arch"; }
    raw="$WORK/python/wheel-$arch/out/libwool-$VERSION-cp39-abi3-manylinux2014_$arch.whl"
    [[ -f "$raw" ]] || die "no $raw"
    # `wheel tags` writes both tags into WHEEL and RECORD; it names the file with the platform
    # tags sorted (manylinux2014 first). The name's order carries no meaning (a set of tags):
    # the file takes the order auditwheel gives, the newer tag first.
    "$PY" -m wheel tags --remove --platform-tag "manylinux_2_17_$arch.manylinux2014_$arch" "$raw" >/dev/null
    whl="libwool-$VERSION-cp39-abi3-manylinux_2_17_$arch.manylinux2014_$arch.whl"
    mv "$WORK/python/wheel-$arch/out/libwool-$VERSION-cp39-abi3-manylinux2014_$arch.manylinux_2_17_$arch.whl" \
        "$DIST/$whl"
    shown="$("$PY" -m auditwheel show "$DIST/$whl" 2>&1)" || die "auditwheel show $whl: $shown"
    grep -q "consistent with the following platform tag: \"manylinux_2_17_$arch\"" <<<"$(tr -s '\n ' ' ' <<<"$shown")" ||
        die "auditwheel show $whl: $shown"
    log "$whl (auditwheel: manylinux_2_17_$arch)"
done

# --- Go --------------------------------------------------------------------------------------
"$ROOT/scripts/release-go.sh" "$VERSION" "$DIST/goproxy" "$STAGE" >&2
log "goproxy/ (scripts/release-go.sh)"

"$ROOT/scripts/release-kubernetes.sh" "$DIST" "$PY"   # the images, the chart, libwool-kubernetes

# --- checks and checksums --------------------------------------------------------------------
# No build path inside anything shipped, unpacked (every archive, wheel and module zip).
scan="$WORK/scan"
mkdir -p "$scan"
while IFS= read -r f; do
    out="$scan/${f//\//_}"
    mkdir -p "$out"
    case "$f" in
        *.tar.gz | *.crate) tar -xzf "$DIST/$f" -C "$out" ;;
        *.whl | *.zip) "$PY" -m zipfile -e "$DIST/$f" "$out" ;;
        *) cp "$DIST/$f" "$out/" ;;
    esac
done < <(cd "$DIST" && find . -type f | sed 's|^\./||' | sort)
leaks="$(grep -rlaF -e "$ROOT" -e "$HOME/" -e "$CARGO_HOME_DIR" -e "$RUSTUP_HOME_DIR" "$scan" || true)"
[[ -z "$leaks" ]] || die "a build path is inside: ${leaks//$scan\//}"

(cd "$DIST" && find . -type f ! -name SHA256SUMS | sed 's|^\./||' | sort | xargs sha256sum >SHA256SUMS)
log "done: $DIST"
(cd "$DIST" && find . -maxdepth 1 -type f -printf '%s\t%f\n' | sort -k2) >&2
