#!/usr/bin/env bash
# Checks the workspace's packages by audience (the README's package table):
#   1. each library package as it would be published: `cargo package` of libwool and
#      libwool-capi, which builds each packaged crate (libwool-capi against the packaged
#      libwool, through cargo's local registry), proto files and vendored protoc included;
#   2. each package and each of libwool's features builds alone, without warnings, so no
#      feature leans on another that it does not turn on;
#   3. the client (libwool, no features) depends on none of the worker's, the scaler's or the
#      programs' crates, and says how many distinct crates it takes.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
status=0
fail() { echo "packages: FAIL: $*" >&2; status=1; }

echo "== cargo package -p libwool -p libwool-capi (each built as packaged)"
# In a target directory of its own (the builds cache of scripts/tools-dir.sh, kept between
# runs): built in target/, the packaged libwool-capi's artifacts, made against the packaged
# libwool, would stand where the workspace's own are, and a later `cargo test -p libwool` would
# link them and see two different libwool crates.
. "$ROOT/scripts/tools-dir.sh"
trim_builds
CARGO_TARGET_DIR="$BUILDS_DIR/package" cargo package --quiet --allow-dirty -p libwool -p libwool-capi ||
    fail "cargo package"

check() { # description, cargo check arguments...
    local what="$1"; shift
    local out
    out="$(cargo check --quiet --message-format short "$@" 2>&1)"
    local rc=$?
    if ((rc)) || grep -q 'warning:' <<<"$out"; then
        printf '%s\n' "$out" >&2
        fail "$what"
    else
        echo "ok: $what"
    fi
}
echo "== each package and feature alone"
check "libwool, no features (the client and fleet)" -p libwool
for feature in lan dns server worker scaler; do
    check "libwool --features $feature" -p libwool --features "$feature"
done
for package in libwool-capi woolctl wool-worker wool-scaler; do
    check "$package alone" -p "$package"
done

echo "== what the client takes"
# `--no-dedupe` off, a crate seen before is printed again with " (*)": strip it before counting.
tree="$(cargo tree --quiet -p libwool -e normal --prefix none | sed 's/ (\*)$//' | sort -u)"
echo "libwool with no features: $(wc -l <<<"$tree") distinct crates (itself included)"
for crate in clap tracing-subscriber prometheus-client tonic-health tonic-reflection axum \
    mdns-sd hickory-resolver kube k8s-openapi; do
    if grep -q "^$crate v" <<<"$tree"; then fail "the client depends on $crate"; fi
done
# The C library (libwool.so) takes the client alone: no Kubernetes client, which is the scaler's.
capi_tree="$(cargo tree --quiet -p libwool-capi -e normal --prefix none | sed 's/ (\*)$//' | sort -u)"
echo "libwool-capi: $(wc -l <<<"$capi_tree") distinct crates (itself included)"
for crate in kube k8s-openapi; do
    if grep -q "^$crate v" <<<"$capi_tree"; then fail "libwool-capi depends on $crate"; fi
done
exit $status
