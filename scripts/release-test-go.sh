#!/usr/bin/env bash
# Installs the released Go module the way a Go user would and runs it against a real worker:
#
#   scripts/release-test-go.sh <dist> <wool-worker-binary>
#
# <dist>/goproxy is the module proxy tree scripts/release-go.sh wrote; the worker is an x86_64
# wool-worker (it prints its address first and exits 0 once stopped). In a temporary
# directory outside the repository, with a module cache of its own, cargo, rustc and
# ~/.cargo/bin taken off PATH, no PKG_CONFIG_PATH (and a pkg-config that fails if anything
# calls it), and no libwool known to the dynamic loader:
#   1. a consumer module (the README's Go program, stopping at any idle time) with
#      GOPROXY=file://<dist>/goproxy, GOFLAGS=-mod=mod, GONOSUMDB naming the module:
#      go get, go build; ldd shows no libwool; run: it polls a worker and stops it, and the
#      worker exits 0. Then `go mod vendor` and a -mod=vendor build (the prebuilt archive is
#      vendored with the binding), which runs as well;
#   2. the same consumer cross-built for linux/arm64 (CC="zig cc -target aarch64-linux-gnu.2.17",
#      zig from PATH, else from scripts/ensure-zigbuild.sh) and run under qemu-user
#      (qemu-aarch64-static with Debian's aarch64 glibc, libc6-arm64-cross) against an x86_64
#      worker over loopback;
#   3. bad input: builds for linux/riscv64 and darwin/arm64 fail at compile time with the
#      message naming the supported platforms (link_unsupported.go), without cgo and with cgo
#      (zig cc as the platform's C compiler), and leave no binary.
# Installs qemu-user-static and libc6-arm64-cross with apt-get when missing (as root).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MODULE=github.com/libwool/libwool/bindings/go
UNSUPPORTED_MSG=libwool_prebuilt_only_for_linux_amd64_and_linux_arm64
log() { echo "release-test-go: $*" >&2; }
fail() { log "FAIL: $*"; exit 1; }

[[ $# -eq 2 ]] || fail "usage: $0 <dist> <wool-worker-binary>"
DIST="$(cd "$1" && pwd)" || fail "no dist directory $1"
WORKER="$(cd "$(dirname "$2")" && pwd)/$(basename "$2")"
[[ -x "$WORKER" ]] || fail "$2 is not an executable wool-worker"
[[ -d "$DIST/goproxy/$MODULE/@v" ]] || fail "no $DIST/goproxy/$MODULE/@v (scripts/release-go.sh makes it)"
VERSION="$(sed -n 's/^version = "\(.*\)"/\1/p' "$ROOT/Cargo.toml" | head -1)"
grep -qx "v$VERSION" "$DIST/goproxy/$MODULE/@v/list" || fail "the proxy tree does not list v$VERSION"

# Tools that need Rust's toolchain or root come first, before PATH loses cargo and rustc.
if ! command -v qemu-aarch64-static >/dev/null || [[ ! -e /usr/aarch64-linux-gnu/lib/ld-linux-aarch64.so.1 ]]; then
    [[ $(id -u) -eq 0 ]] || fail "qemu-aarch64-static and /usr/aarch64-linux-gnu (libc6-arm64-cross) are needed"
    log "installing qemu-user-static and libc6-arm64-cross"
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        qemu-user-static libc6-arm64-cross >&2
fi
# Zig: the one on PATH (a caller that prepended scripts/ensure-zigbuild.sh's directory), else
# from scripts/ensure-zigbuild.sh itself, which needs rustup and rustc and so runs only here,
# before PATH loses them.
if command -v zig >/dev/null; then
    ZIG="$(command -v zig)"
elif command -v rustc >/dev/null; then
    ZIG="$("$ROOT/scripts/ensure-zigbuild.sh")/zig"
else
    fail "no zig on PATH: prepend the directory scripts/ensure-zigbuild.sh prints"
fi
[[ -x "$ZIG" ]] || fail "no zig at $ZIG"
log "zig $("$ZIG" version) ($ZIG)"

work="$(mktemp -d "${TMPDIR:-/tmp}/wool-release-go.XXXXXX")"
cleanup() {
    [[ -n "${worker_pid:-}" ]] && kill "$worker_pid" 2>/dev/null
    chmod -R u+w "$work" 2>/dev/null # the module cache is read-only
    rm -rf "$work"
}
trap cleanup EXIT

. "$ROOT/scripts/release-lib.sh"
path_without_rust
# A pkg-config that refuses: the default build must not ask it anything.
mkdir -p "$work/bin"
printf '#!/bin/sh\necho "pkg-config was called ($*): the prebuilt build must not need it" >&2\nexit 1\n' \
    >"$work/bin/pkg-config"
chmod +x "$work/bin/pkg-config"
PATH="$work/bin:$PATH"
command -v go >/dev/null || fail "go is not on PATH"
unset PKG_CONFIG_PATH PKG_CONFIG_LIBDIR CGO_CFLAGS CGO_LDFLAGS LD_LIBRARY_PATH GOFLAGS
loader_libs="$(ldconfig -p)"
if grep -q libwool <<<"$loader_libs"; then fail "libwool is installed on this system: $(grep libwool <<<"$loader_libs")"; fi

export GOPROXY="file://$DIST/goproxy" GONOSUMDB="$MODULE" GOFLAGS=-mod=mod GOTOOLCHAIN=local
export GOMODCACHE="$work/gomodcache" GOPATH="$work/gopath"

consumer="$work/consumer"
mkdir -p "$consumer"
# The README's Go program, its "idle at least 5 minutes" turned into "any idle time", so that
# it stops the worker it has just polled.
go_snippet="$(snippet go)"
[[ "$go_snippet" == *'os.Args[1]'* && "$go_snippet" == *'idle >= 5*time.Minute:'* && "$go_snippet" == *'func main()'* ]] ||
    fail "README's Go program changed: $go_snippet"
sed -e 's/idle >= 5\*time.Minute:/idle >= 0:/' <<<"$go_snippet" >"$consumer/main.go"
cd "$consumer"
printf 'module example.com/woolconsumer\n\ngo 1.24\n' >go.mod

log "1. go get $MODULE@v$VERSION from $GOPROXY"
go get "$MODULE@v$VERSION"
grep -q "^$MODULE v$VERSION h1:" go.sum || fail "go.sum has no h1: line for the module zip"
go build -o woolconsumer .
needs="$(ldd woolconsumer)"
if grep -q libwool <<<"$needs"; then fail "woolconsumer needs libwool.so: $needs"; fi
symbols="$(nm woolconsumer)"
grep -q ' T wool_version$' <<<"$symbols" || fail "woolconsumer does not contain libwool (no wool_version)"
log "woolconsumer ($(stat -c %s woolconsumer) bytes) contains libwool and needs only:" \
    $(readelf -d woolconsumer | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
start_worker
./woolconsumer "$address"
expect_stopped "Go linux/amd64 from the file proxy"

log "1b. go mod vendor; go build -mod=vendor"
go mod vendor
[[ -f "vendor/$MODULE/lib/linux_amd64/libwool.a" && -f "vendor/$MODULE/include/wool.h" ]] ||
    fail "go mod vendor left out the prebuilt libwool.a or wool.h"
GOFLAGS=-mod=vendor go build -o woolconsumer-vendored .
start_worker
./woolconsumer-vendored "$address"
expect_stopped "Go linux/amd64, vendored"
rm -rf vendor

log "2. cross-built for linux/arm64 with zig cc, run under qemu-aarch64-static"
CGO_ENABLED=1 GOOS=linux GOARCH=arm64 CC="$ZIG cc -target aarch64-linux-gnu.2.17" \
    go build -o woolconsumer-arm64 .
elf="$(readelf -h -d woolconsumer-arm64)"
grep -q 'Machine: *AArch64' <<<"$elf" || fail "woolconsumer-arm64 is not an AArch64 ELF file"
if grep -q 'NEEDED.*libwool' <<<"$elf"; then fail "woolconsumer-arm64 needs libwool.so"; fi
start_worker
qemu-aarch64-static -L /usr/aarch64-linux-gnu ./woolconsumer-arm64 "$address"
expect_stopped "Go linux/arm64 under qemu"

log "3. unsupported platforms fail at compile time, naming the supported ones"
# Without cgo (the go command's default when cross-compiling) and with cgo and a working C
# cross compiler (zig's) for the platform: either way the error is link_unsupported.go's.
declare -A zig_target=([linux/riscv64]=riscv64-linux-gnu [darwin/arm64]=aarch64-macos)
for platform in linux/riscv64 darwin/arm64; do
    for cgo in 0 1; do
        out="$work/unsupported-${platform//\//-}-$cgo"
        cc=()
        ((cgo)) && cc=(CC="$ZIG cc -target ${zig_target[$platform]}")
        if output="$(env GOOS="${platform%/*}" GOARCH="${platform#*/}" CGO_ENABLED=$cgo "${cc[@]}" \
            go build -o "$out" . 2>&1)"; then
            fail "the build for $platform (CGO_ENABLED=$cgo) succeeded"
        fi
        grep -q "$UNSUPPORTED_MSG" <<<"$output" ||
            fail "the build for $platform (CGO_ENABLED=$cgo) failed without naming the supported platforms: $output"
        [[ ! -e "$out" ]] || fail "the failed build for $platform left $out"
        log "$platform, CGO_ENABLED=$cgo: $(grep -m1 "$UNSUPPORTED_MSG" <<<"$output")"
    done
done
log "all Go release checks passed (linux/amd64 and linux/arm64 consumers polled and stopped a worker)"
