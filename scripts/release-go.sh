#!/usr/bin/env bash
# Lays out the Go binding as a Go module proxy serves it, carrying prebuilt static libwool:
#
#   scripts/release-go.sh <version> <goproxy-dir> <stage-dir>
#   e.g. scripts/release-go.sh 0.5.0 dist/goproxy target/release-stage
#
# <stage-dir> is what scripts/release.sh stages per target triple:
#   <stage-dir>/x86_64-unknown-linux-gnu/{lib/libwool.a, include/wool.h}
#   <stage-dir>/aarch64-unknown-linux-gnu/{lib/libwool.a, include/wool.h}
# (stripped, built for a glibc floor of 2.17). Into <goproxy-dir> it writes the module
# github.com/libwool/libwool/bindings/go at version v<version>:
#   github.com/libwool/libwool/bindings/go/@v/{list, v<version>.info, .mod, .zip}
# so that GOPROXY=file://<goproxy-dir> serves it (with GONOSUMDB naming the module, or
# GOSUMDB=off: no checksum database knows it). In a repository the version's tag would be
# bindings/go/v<version>, the module's directory being its prefix.
#
# The module zip holds the binding's tracked files (git ls-files bindings/go), the repository's
# LICENSE, include/wool.h (the repository's header; each staged copy is checked to be the same
# file) and lib/linux_amd64/libwool.a, lib/linux_arm64/libwool.a, which link_prebuilt_linux_*.go
# link by build constraint. scripts/gomodzip (golang.org/x/mod/zip, the go command's own rules)
# makes the zip: entries in path order, no timestamps, so two runs give the same bytes. The
# .info time is SOURCE_DATE_EPOCH, else the commit's time.
#
# Needs: go (>= 1.26 for scripts/gomodzip's golang.org/x/mod, fetched from the Go module proxy
# once), git, readelf.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MODULE=github.com/libwool/libwool/bindings/go
fail() { echo "release-go: $*" >&2; exit 1; }

[[ $# -eq 3 ]] || fail "usage: $0 <version> <goproxy-dir> <stage-dir>"
version="${1#v}"
proxy="$(mkdir -p "$2" && cd "$2" && pwd)"
stage="$(cd "$3" && pwd)" || fail "no stage directory $3"
[[ "$version" =~ ^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]] || fail "version $1 is not x.y.z"

# The staged archives: the right machine each, stripped, and the header the repository's.
declare -A goarch_of=([x86_64-unknown-linux-gnu]=amd64 [aarch64-unknown-linux-gnu]=arm64)
declare -A machine_of=([x86_64-unknown-linux-gnu]="Advanced Micro Devices X86-64" [aarch64-unknown-linux-gnu]=AArch64)
for triple in x86_64-unknown-linux-gnu aarch64-unknown-linux-gnu; do
    lib="$stage/$triple/lib/libwool.a"
    header="$stage/$triple/include/wool.h"
    [[ -f "$lib" ]] || fail "no $lib (scripts/release.sh stages it)"
    [[ -f "$header" ]] || fail "no $header"
    cmp -s "$header" "$ROOT/include/wool.h" || fail "$header is not the repository's include/wool.h"
    # (readelf's output is taken whole first: grep quitting early would SIGPIPE it under pipefail)
    headers="$(readelf -h "$lib")"
    machines="$(sed -n 's/^ *Machine: *//p' <<<"$headers" | sort -u)"
    [[ "$machines" == "${machine_of[$triple]}" ]] ||
        fail "$lib holds objects for '$machines', want ${machine_of[$triple]} only"
    sections="$(readelf -S -W "$lib")"
    if grep -Eq ' \.debug_(info|line|str) ' <<<"$sections"; then fail "$lib is not stripped (it has debug info)"; fi
done

work="$(mktemp -d "${TMPDIR:-/tmp}/wool-release-go.XXXXXX")"
trap 'rm -rf "$work"' EXIT
mod="$work/module"
mkdir -p "$mod"
# The binding's tracked files only: nothing a local build or test left behind.
(cd "$ROOT/bindings/go" && git ls-files -z . | xargs -0 cp --parents -t "$mod")
[[ -f "$mod/go.mod" ]] || fail "bindings/go has no tracked go.mod"
cp "$ROOT/LICENSE" "$mod/LICENSE"
cp "$ROOT/include/wool.h" "$mod/include/wool.h"
for triple in "${!goarch_of[@]}"; do
    cp "$stage/$triple/lib/libwool.a" "$mod/lib/linux_${goarch_of[$triple]}/libwool.a"
done

epoch="${SOURCE_DATE_EPOCH:-$(git -C "$ROOT" log -1 --format=%ct)}"
stamp="$(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)"
out="$(cd "$ROOT/scripts/gomodzip" && go run . -module "$MODULE" -version "v$version" \
    -dir "$mod" -proxy "$proxy" -time "$stamp")"
echo "$out" | sed 's/^/release-go: /'
zip_file="$proxy/$MODULE/@v/v$version.zip"
unzipped="$(find "$mod" -type f -printf '%s\n' | awk '{ n += $1 } END { print n }')"
echo "release-go: $MODULE v$version: zip $(stat -c %s "$zip_file") bytes, $unzipped bytes unzipped (the proxy's limit: 500 MB unzipped)"
