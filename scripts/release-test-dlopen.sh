#!/usr/bin/env bash
# Loads the released libwool.so from other runtimes with dlopen, no binding package, and runs
# each against a real worker:
#
#   scripts/release-test-dlopen.sh <dist> <wool-worker-binary>
#
# Unpacks <dist>/libwool-<version>-x86_64-linux-gnu.tar.gz (the C archive scripts/release.sh
# makes; <version> from Cargo.toml) into a temporary directory outside the repository and,
# with cargo, rustc and ~/.cargo/bin taken off PATH and no LD_LIBRARY_PATH, runs:
#   1. examples/node (koffi from the npm registry, pinned by package-lock.json: `npm ci`);
#   2. examples/java (JNA from Maven Central, pinned in pom.xml, fetched by Maven with strict
#      checksums and then checked against the SHA-256 below; compiled with javac, Java 17).
# Each loads lib/libwool.so by path (LIBWOOL_PATH), prints the library's version, connects,
# polls the worker's idle time, stops it, frees the handle, and shows wool_last_error's
# message for a refused target; the worker must then exit 0.
# Needs node and npm (Node >= 18), java and javac 17, mvn, and the registries (npm, Maven
# Central) the first time.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
JNA_VERSION=5.19.1
JNA_SHA256=4fb141dd8ef6b0585ffceea4bc49602fbc6312fa977e2c488794ea3e6aafecae
log() { echo "release-test-dlopen: $*" >&2; }
fail() { log "FAIL: $*"; exit 1; }

[[ $# -eq 2 ]] || fail "usage: $0 <dist> <wool-worker-binary>"
DIST="$(cd "$1" && pwd)" || fail "no dist directory $1"
WORKER="$(cd "$(dirname "$2")" && pwd)/$(basename "$2")"
[[ -x "$WORKER" ]] || fail "$2 is not an executable wool-worker"
VERSION="$(sed -n 's/^version = "\(.*\)"/\1/p' "$ROOT/Cargo.toml" | head -1)"
ARCHIVE="$DIST/libwool-$VERSION-x86_64-linux-gnu.tar.gz"
[[ -f "$ARCHIVE" ]] || fail "no $ARCHIVE (scripts/release.sh makes it)"
for tool in node npm java javac mvn; do
    command -v "$tool" >/dev/null || fail "$tool is not on PATH"
done
grep -q "\"koffi\": \"[0-9]" "$ROOT/examples/node/package.json" || fail "koffi is not pinned to a version"
grep -q "<version>$JNA_VERSION</version>" "$ROOT/examples/java/pom.xml" || fail "pom.xml does not pin JNA $JNA_VERSION"

work="$(mktemp -d "${TMPDIR:-/tmp}/wool-release-dlopen.XXXXXX")"
cleanup() { [[ -n "${worker_pid:-}" ]] && kill "$worker_pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

. "$ROOT/scripts/release-lib.sh"
path_without_rust
unset LD_LIBRARY_PATH LD_PRELOAD

mkdir -p "$work/prefix"
tar -xzf "$ARCHIVE" -C "$work/prefix"
# The archive's lib/libwool.so (at its top or under one top-level directory).
LIB="$(find "$work/prefix" -maxdepth 3 -path '*/lib/libwool.so' | head -1)"
[[ -n "$LIB" && -e "$LIB" ]] || fail "$ARCHIVE has no lib/libwool.so"
log "loading $(readlink -f "$LIB" | sed "s|$work/prefix/||") out of $(basename "$ARCHIVE")"
export LIBWOOL_PATH="$LIB"

log "1. Node.js $(node --version) with koffi (npm ci)"
mkdir -p "$work/node"
cp "$ROOT"/examples/node/{package.json,package-lock.json,poll_then_retire.js} "$work/node/"
# koffi's install script only rebuilds from source when its prebuilt module is missing; its
# packages carry prebuilt modules, so no script needs to run.
(cd "$work/node" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error >&2)
start_worker
(cd "$work/node" && node poll_then_retire.js "$address")
expect_stopped "Node.js (koffi)"

log "2. Java $(java -version 2>&1 | sed -n '1s/.*"\(.*\)".*/\1/p') with JNA $JNA_VERSION (Maven Central)"
mkdir -p "$work/java"
cp -r "$ROOT/examples/java/pom.xml" "$ROOT/examples/java/src" "$work/java/"
# (Debian's Maven 3.8 prints colour resets even in batch mode: they are taken out)
(cd "$work/java" && mvn -B -q --strict-checksums dependency:copy-dependencies -DoutputDirectory=lib 2>&1 |
    sed 's/\x1b\[[0-9;]*m//g' >&2)
jar="$work/java/lib/jna-$JNA_VERSION.jar"
echo "$JNA_SHA256  $jar" | sha256sum -c --quiet - || fail "jna-$JNA_VERSION.jar's SHA-256 is not the pinned one"
javac -d "$work/java/classes" -cp "$jar" \
    "$work/java/src/main/java/io/libwool/example/PollThenRetire.java"
start_worker
java -cp "$work/java/classes:$jar" io.libwool.example.PollThenRetire "$address"
expect_stopped "Java (JNA)"
log "Node.js (koffi) and Java (JNA) loaded $(basename "$ARCHIVE")'s libwool.so, polled and stopped a worker"
