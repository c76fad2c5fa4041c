#!/usr/bin/env bash
# Installs each artifact scripts/release.sh made the way its users would, in a temporary
# directory outside the repository, with cargo, rustc and ~/.cargo/bin taken off PATH, and runs
# the README's snippet for that host against a real wool-worker (idle, then stop: the worker
# must then exit, which only a successful stop makes it do):
#   1. glibc floor: no shipped shared library needs a GLIBC_ symbol version above 2.17
#      (llvm-objdump -T, both arches: the C archives' and the wheels' libraries);
#   2. Python: the x86_64 wheel in a fresh venv (`pip install --no-index --find-links DIST
#      libwool`), the README's Python snippet;
#   3. C, x86_64: the archive unpacked into a prefix, the README's C snippet built with
#      pkg-config (only PKG_CONFIG_PATH set; shared, and static with Libs.private) and with
#      CMake find_package(wool 0.5) (only CMAKE_PREFIX_PATH set; wool::wool and
#      wool::wool_static), each run;
#   4. aarch64 under qemu-user against the x86_64 worker over loopback: the README's C snippet
#      cross-built (zig cc, aarch64-linux-gnu.2.17) against the aarch64 archive by pkg-config,
#      shared and static; and the aarch64 wheel's library dlopen'ed by a small aarch64 C host;
#   5. bad input, each refused with a clear message and nothing installed: Python 3.8 (pip
#      cites Requires-Python, from a PEP 503 index of DIST as PyPI would serve it), the other
#      arch's wheel (not a supported wheel on this platform), LIBWOOL_PATH naming a missing
#      file (ImportError naming the path);
#   6. Go, the dlopen examples (Node, Java) and the Kubernetes files: scripts/release-test-go.sh,
#      scripts/release-test-dlopen.sh, scripts/release-test-kubernetes.sh;
#   7. the sdist, in another venv, built from source: here cargo is back on PATH.
#
#   scripts/release-test.sh [DIST] [WOOL_WORKER]     (defaults: dist/, target/debug/wool-worker)
#
# Needs qemu-aarch64-static and an aarch64 glibc (Debian qemu-user-static, libc6-arm64-cross,
# libgcc-s1-arm64-cross: installed here with apt-get when missing and root; .ci/run does too),
# cmake, pkg-config, cc, python3 with venv, Python 3.8 from pyenv for the requires-python case
# (without it, pip's own `--python-version 3.8` resolution is checked instead), and PyPI for the
# sdist's build backend.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
DIST="$(cd "${1:-$ROOT/dist}" && pwd)"
WORKER_ARG="${2:-$ROOT/target/debug/wool-worker}"
log() { echo "release-test: $*" >&2; }
fail() { log "FAIL: $*"; exit 1; }
VERSION="$(sed -n 's/^version = "\(.*\)"/\1/p' capi/Cargo.toml | head -1)"
[[ -f "$DIST/SHA256SUMS" ]] || fail "no $DIST/SHA256SUMS: run scripts/release.sh first"
(cd "$DIST" && sha256sum --quiet -c SHA256SUMS) || fail "SHA256SUMS does not match $DIST"

if [[ ! -x "$WORKER_ARG" ]]; then
    cargo build --quiet -p wool-worker
fi
WORKER="$(cd "$(dirname "$WORKER_ARG")" && pwd)/$(basename "$WORKER_ARG")"
ZIGBIN="$("$ROOT/scripts/ensure-zigbuild.sh")"   # zig (the aarch64 C compiler), llvm-objdump
# What runs aarch64 programs here.
need_pkgs=()
command -v qemu-aarch64-static >/dev/null || need_pkgs+=(qemu-user-static)
[[ -e /usr/aarch64-linux-gnu/lib/ld-linux-aarch64.so.1 ]] || need_pkgs+=(libc6-arm64-cross)
[[ -e /usr/aarch64-linux-gnu/lib/libgcc_s.so.1 ]] || need_pkgs+=(libgcc-s1-arm64-cross)
if ((${#need_pkgs[@]})); then
    [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null || fail "needs ${need_pkgs[*]}"
    log "installing ${need_pkgs[*]}"
    apt-get update -qq && apt-get install -y -qq "${need_pkgs[@]}" >&2
fi
QEMU=(qemu-aarch64-static -L /usr/aarch64-linux-gnu)
PY38=""
if command -v pyenv >/dev/null; then
    v38="$(pyenv versions --bare 2>/dev/null | grep -E '^3\.8\.[0-9]+$' | tail -1 || true)"
    [[ -n "$v38" ]] && PY38="$(pyenv root)/versions/$v38/bin/python3.8"
fi
HOST_PY="$(command -v python3)"
[[ "$HOST_PY" == */shims/* ]] && HOST_PY="$(pyenv which python3)"   # the interpreter, not pyenv's shim

work="$(mktemp -d "${TMPDIR:-/tmp}/wool-release-test.XXXXXX")"
[[ "$work" != "$ROOT"* ]] || fail "the temporary directory $work is inside the repository"
cleanup() { [[ -n "${worker_pid:-}" ]] && kill "$worker_pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

# No Rust: every PATH entry holding cargo or rustc goes. The zig directory stays (zig,
# llvm-objdump: a C compiler and an ELF reader, no Rust).
FULL_PATH="$PATH"
. "$ROOT/scripts/release-lib.sh"
path_without_rust "$ZIGBIN"
NO_RUST_PATH="$PATH"
unset LD_LIBRARY_PATH LD_PRELOAD PKG_CONFIG_PATH CMAKE_PREFIX_PATH LIBRARY_PATH CPATH C_INCLUDE_PATH \
    LIBWOOL_PATH PYTHONPATH PYTHONHOME VIRTUAL_ENV

# The README's snippets, made into programs: the address from argv, and "idle over 300 s"
# turned into "any idle time", so that the snippet stops the worker it has just polled.
c_snippet="$(snippet c)"
py_snippet="$(snippet python)"
[[ "$c_snippet" == *'argv[1]'* && "$c_snippet" == *'idle > 300.0'* && "$c_snippet" == *'int main('* ]] ||
    fail "README's C program changed: $c_snippet"
[[ "$py_snippet" == *'"127.0.0.1:50051"'* && "$py_snippet" == *'>= 300.0'* ]] ||
    fail "README's Python snippet changed: $py_snippet"
{
    sed -e 's/idle > 300.0/idle >= 0.0/' <<<"$c_snippet"
} >"$work/readme.c"
{
    printf 'import sys\n\n'
    sed -e 's/"127.0.0.1:50051"/sys.argv[1]/; s/>= 300.0/>= 0.0/' <<<"$py_snippet"
    printf '\nprint("libwool", libwool.version(), "from", libwool.load().path)\n'
} >"$work/readme.py"

# --- 1. glibc floor --------------------------------------------------------------------------
mkdir -p "$work/unpacked"
for arch in x86_64 aarch64; do
    tar -xzf "$DIST/libwool-$VERSION-$arch-linux-gnu.tar.gz" -C "$work/unpacked"
    "$HOST_PY" -m zipfile -e "$DIST/libwool-$VERSION-cp39-abi3-manylinux_2_17_$arch.manylinux2014_$arch.whl" \
        "$work/unpacked/wheel-$arch"
done
elves=0
while IFS= read -r -d '' f; do
    [[ "$(head -c4 "$f" | od -An -c | tr -d ' ')" == '177ELF' ]] || continue
    highest="$(llvm-objdump -T "$f" | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)"
    [[ -n "$highest" ]] || fail "${f#"$work"/unpacked/}: no GLIBC_ symbol versions at all"
    if [[ "$(printf '%s\n' "$highest" GLIBC_2.17 | sort -V | tail -1)" != GLIBC_2.17 ]]; then
        fail "${f#"$work"/unpacked/} needs $highest (the floor is GLIBC_2.17)"
    fi
    log "ok: ${f#"$work"/unpacked/}: $(llvm-objdump -f "$f" | sed -n 's/.*file format //p'), needs up to $highest"
    elves=$((elves + 1))
done < <(find "$work/unpacked" -type f -name '*.so*' -print0 | sort -z)
((elves == 4)) || fail "expected 4 shared libraries (2 archives, 2 wheels), found $elves"
for arch in x86_64 aarch64; do
    cmp -s "$work/unpacked/wheel-$arch/libwool/_libwool.abi3.so" \
        "$work/unpacked/libwool-$VERSION-$arch-linux-gnu/lib/libwool.so.$VERSION" ||
        fail "the $arch wheel's library is not the C archive's libwool.so.$VERSION"
done
log "ok: each wheel bundles its arch's C archive library, byte for byte"

# --- 2. Python wheel -------------------------------------------------------------------------
cd "$work"
"$HOST_PY" -m venv "$work/venv-wheel"
"$work/venv-wheel/bin/pip" install -q --disable-pip-version-check --no-index --find-links "$DIST" libwool
installed="$("$work/venv-wheel/bin/python" -c 'import libwool, os; print(os.path.dirname(libwool.__file__))')"
[[ "$installed" == "$work/venv-wheel/"* ]] || fail "libwool imported from $installed"
start_worker
"$work/venv-wheel/bin/python" "$work/readme.py" "$address"
expect_stopped "Python wheel (x86_64), README snippet"

# --- 3. C, x86_64 ----------------------------------------------------------------------------
P="$work/unpacked/libwool-$VERSION-x86_64-linux-gnu"
mkdir -p "$work/c" && cd "$work/c"
cp "$work/readme.c" app.c
# shellcheck disable=SC2046
PKG_CONFIG_PATH="$P/lib/pkgconfig" cc -Wall -Werror app.c $(PKG_CONFIG_PATH="$P/lib/pkgconfig" pkg-config --cflags --libs wool) \
    -Wl,-rpath,"$P/lib" -o app-shared
grep -q "libwool.so.0" <<<"$(ldd app-shared)" || fail "app-shared does not load libwool.so: $(ldd app-shared)"
start_worker; ./app-shared "$address"; expect_stopped "C x86_64, pkg-config, shared"
# shellcheck disable=SC2046
cc -Wall -Werror app.c $(PKG_CONFIG_PATH="$P/lib/pkgconfig" pkg-config --cflags wool) \
    $(PKG_CONFIG_PATH="$P/lib/pkgconfig" pkg-config --static --libs wool | sed 's/-lwool\b/-l:libwool.a/') -o app-static
if grep -q libwool <<<"$(ldd app-static)"; then fail "app-static needs libwool.so"; fi
start_worker; ./app-static "$address"; expect_stopped "C x86_64, pkg-config --static"
mkdir -p cmake && cp app.c cmake/
cat >cmake/CMakeLists.txt <<EOF
cmake_minimum_required(VERSION 3.16)
project(app C)
find_package(wool ${VERSION%.*} REQUIRED)
add_executable(app app.c)
target_link_libraries(app PRIVATE wool::wool)
add_executable(app-static app.c)
target_link_libraries(app-static PRIVATE wool::wool_static)
EOF
CMAKE_PREFIX_PATH="$P" cmake -S cmake -B cmake/build -DCMAKE_BUILD_TYPE=Release >"$work/cmake.log" 2>&1 ||
    { cat "$work/cmake.log" >&2; fail "cmake configure"; }
cmake --build cmake/build >>"$work/cmake.log" 2>&1 || { cat "$work/cmake.log" >&2; fail "cmake build"; }
start_worker; cmake/build/app "$address"; expect_stopped "C x86_64, CMake find_package, wool::wool"
if grep -q libwool <<<"$(ldd cmake/build/app-static)"; then fail "CMake app-static needs libwool.so"; fi
start_worker; cmake/build/app-static "$address"; expect_stopped "C x86_64, CMake find_package, wool::wool_static"
# An incompatible request is refused by the version file.
sed -i "s/find_package(wool [0-9.]* REQUIRED)/find_package(wool 9.0 REQUIRED)/" cmake/CMakeLists.txt
if CMAKE_PREFIX_PATH="$P" cmake -S cmake -B cmake/build9 >"$work/cmake9.log" 2>&1; then
    fail "find_package(wool 9.0) accepted $VERSION"
fi
grep -q "$VERSION" "$work/cmake9.log" || fail "CMake's refusal does not name $VERSION: $(cat "$work/cmake9.log")"
log "ok: find_package(wool 9.0) refused ($VERSION found)"

# --- 4. aarch64 under qemu -------------------------------------------------------------------
A="$work/unpacked/libwool-$VERSION-aarch64-linux-gnu"
mkdir -p "$work/aarch64" && cd "$work/aarch64"
cp "$work/readme.c" app.c
ZCC=(zig cc -target aarch64-linux-gnu.2.17)
# shellcheck disable=SC2046
"${ZCC[@]}" -Wall -Werror app.c $(PKG_CONFIG_PATH="$A/lib/pkgconfig" pkg-config --cflags --libs wool) \
    -Wl,-rpath,"$A/lib" -o app-shared
# shellcheck disable=SC2046
"${ZCC[@]}" -Wall -Werror app.c $(PKG_CONFIG_PATH="$A/lib/pkgconfig" pkg-config --cflags wool) "$A/lib/libwool.a" \
    $(PKG_CONFIG_PATH="$A/lib/pkgconfig" pkg-config --static --libs-only-l wool | sed 's/-lwool\b//') -o app-static
for p in app-shared app-static; do
    llvm-objdump -f "$p" | grep -q 'elf64-littleaarch64' || fail "$p is not aarch64"
done
if llvm-objdump -p app-static | grep NEEDED | grep -q libwool; then fail "aarch64 app-static needs libwool.so"; fi
start_worker; "${QEMU[@]}" ./app-shared "$address"; expect_stopped "C aarch64 (qemu), pkg-config, shared"
start_worker; "${QEMU[@]}" ./app-static "$address"; expect_stopped "C aarch64 (qemu), static libwool.a"
# The aarch64 wheel's library, dlopen'ed as Python's ctypes does, by an aarch64 C host.
cat >host.c <<'EOF'
/* dlopen()s libwool out of the unpacked wheel (argv[1]), polls the worker at argv[2], stops it. */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
typedef struct wool_connection wool_connection;
int main(int argc, char **argv) {
    if (argc != 3) return 2;
    void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!lib) { fprintf(stderr, "dlopen: %s\n", dlerror()); return 1; }
    const char *(*version)(void) = (const char *(*)(void))dlsym(lib, "wool_version");
    int (*connect)(const char *, const void *, wool_connection **) =
        (int (*)(const char *, const void *, wool_connection **))dlsym(lib, "wool_connect");
    int (*idle)(wool_connection *, double, double *) =
        (int (*)(wool_connection *, double, double *))dlsym(lib, "wool_idle");
    int (*stop)(wool_connection *, double, double) =
        (int (*)(wool_connection *, double, double))dlsym(lib, "wool_stop");
    void (*free_conn)(wool_connection *) = (void (*)(wool_connection *))dlsym(lib, "wool_free");
    if (!version || !connect || !idle || !stop || !free_conn) { fprintf(stderr, "dlsym failed\n"); return 1; }
    wool_connection *conn;
    double seconds = -1;
    int s = connect(argv[2], NULL, &conn);
    if (s != 0) { fprintf(stderr, "connect: %d\n", s); return 1; }
    s = idle(conn, 10.0, &seconds);
    if (s == 0) s = stop(conn, 30.0, INFINITY);
    free_conn(conn);
    printf("libwool %s (aarch64 wheel): idle %.3f s, stop status %d\n", version(), seconds, s);
    return s == 0 ? 0 : 1;
}
EOF
"${ZCC[@]}" -Wall -Werror host.c -ldl -o host
start_worker
"${QEMU[@]}" ./host "$work/unpacked/wheel-aarch64/libwool/_libwool.abi3.so" "$address"
expect_stopped "aarch64 wheel's library, dlopen'ed under qemu"

# --- 5. bad input ----------------------------------------------------------------------------
cd "$work"
# Python 3.8: pip refuses, citing Requires-Python, as from PyPI (whose simple index carries
# data-requires-python): DIST served as a PEP 503 index with the wheels' Requires-Python.
mkdir -p "$work/simple/libwool"
requires="$("$HOST_PY" - "$DIST" <<'EOF'
import glob, sys, zipfile
whl = sorted(glob.glob(f"{sys.argv[1]}/libwool-*.whl"))[0]
with zipfile.ZipFile(whl) as z:
    meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
    print(next(l.split(":", 1)[1].strip() for l in z.read(meta).decode().splitlines()
               if l.startswith("Requires-Python:")))
EOF
)"
[[ "$requires" == ">=3.9" ]] || fail "the wheels say Requires-Python: $requires"
{
    echo '<!DOCTYPE html><html><body>'
    for f in "$DIST"/libwool-*.whl "$DIST/libwool-$VERSION.tar.gz"; do
        printf '<a href="file://%s#sha256=%s" data-requires-python="&gt;=3.9">%s</a>\n' \
            "$f" "$(sha256sum "$f" | cut -d' ' -f1)" "$(basename "$f")"
    done
    echo '</body></html>'
} >"$work/simple/libwool/index.html"
if [[ -n "$PY38" && -x "$PY38" ]]; then
    "$PY38" -m venv "$work/venv38"
    if "$work/venv38/bin/pip" install --disable-pip-version-check --index-url "file://$work/simple" libwool \
        >"$work/py38.log" 2>&1; then
        fail "Python 3.8 installed libwool"
    fi
    grep -qi 'requires-python.*>=3.9\|requires a different python' "$work/py38.log" ||
        fail "pip on Python 3.8 refused without citing Requires-Python: $(cat "$work/py38.log")"
    if "$work/venv38/bin/python" -c 'import libwool' 2>/dev/null; then fail "libwool importable on 3.8"; fi
    log "ok: Python 3.8 refused: $(grep -i 'requires' "$work/py38.log" | head -1)"
else
    "$HOST_PY" -m pip install --disable-pip-version-check --dry-run --python-version 3.8 \
        --only-binary=:all: --target "$work/t38" --index-url "file://$work/simple" libwool \
        >"$work/py38.log" 2>&1 && fail "pip --python-version 3.8 resolved libwool"
    grep -qi 'requires-python.*>=3.9\|requires a different python' "$work/py38.log" ||
        fail "pip --python-version 3.8 refused without citing Requires-Python: $(cat "$work/py38.log")"
    log "ok: (no Python 3.8 here) pip --python-version 3.8 refused: $(grep -i 'requires' "$work/py38.log" | head -1)"
fi
# The other arch's wheel.
"$HOST_PY" -m venv "$work/venv-other"
other="$DIST/libwool-$VERSION-cp39-abi3-manylinux_2_17_aarch64.manylinux2014_aarch64.whl"
if "$work/venv-other/bin/pip" install --disable-pip-version-check --no-index "$other" >"$work/other.log" 2>&1; then
    fail "pip installed the aarch64 wheel on x86_64"
fi
grep -q 'is not a supported wheel on this platform' "$work/other.log" ||
    fail "the aarch64 wheel refused without saying why: $(cat "$work/other.log")"
if "$work/venv-other/bin/python" -c 'import libwool' 2>/dev/null; then fail "libwool half-installed"; fi
log "ok: aarch64 wheel refused: $(grep -o '[^ ]* is not a supported wheel on this platform' "$work/other.log")"
# LIBWOOL_PATH naming a missing file: `import libwool` raises ImportError naming it.
missing="$work/no-such-dir/libwool.so"
if LIBWOOL_PATH="$missing" "$work/venv-wheel/bin/python" -c '
import sys
try:
    import libwool
except ImportError as e:
    print(e, file=sys.stderr); sys.exit(3)
' 2>"$work/missing.log"; then fail "LIBWOOL_PATH=$missing: no ImportError"; fi
grep -qF "$missing" "$work/missing.log" || fail "the error does not name $missing: $(cat "$work/missing.log")"
log "ok: LIBWOOL_PATH missing: $(head -2 "$work/missing.log" | tr '\n' ' ')"

# --- 6. Go, Node, Java, Kubernetes -------------------------------------------------------------------
for t in release-test-go release-test-dlopen release-test-kubernetes; do
    if [[ -x "$ROOT/scripts/$t.sh" ]]; then
        "$ROOT/scripts/$t.sh" "$DIST" "$WORKER" || fail "scripts/$t.sh"
        log "ok: scripts/$t.sh"
    else
        fail "scripts/$t.sh is missing"
    fi
done

# --- 7. the sdist, built from source (cargo back on PATH) ------------------------------------
# The dev profile in a target directory of its own (kept under target/ between runs): the
# point is that the sdist builds, not how fast its library is.
PATH="$FULL_PATH"
"$HOST_PY" -m venv "$work/venv-sdist"
start=$SECONDS
CARGO_TARGET_DIR="$ROOT/target/sdist-check" SETUPTOOLS_RUST_CARGO_PROFILE=dev \
    "$work/venv-sdist/bin/pip" install -q --disable-pip-version-check "$DIST/libwool-$VERSION.tar.gz" \
    >"$work/sdist.log" 2>&1 || { cat "$work/sdist.log" >&2; fail "pip install the sdist"; }
log "sdist built and installed in $((SECONDS - start)) s"
PATH="$NO_RUST_PATH"
start_worker
"$work/venv-sdist/bin/python" "$work/readme.py" "$address"
expect_stopped "Python sdist (built with cargo), README snippet"
log "all passed"
