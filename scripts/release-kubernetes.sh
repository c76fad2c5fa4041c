#!/usr/bin/env bash
# The Kubernetes part of a release, into DIST (scripts/release.sh calls it before its checksums):
#
#   wool-worker-<v>.oci.tar, wool-scaler-<v>.oci.tar   the images as OCI archives, and each
#   wool-worker-<v>.digest, wool-scaler-<v>.digest     manifest's digest (scripts/images.sh)
#   wool-scaler-<chart version>.tgz                    the Helm chart (`helm package`, the pinned
#                                                      Helm of scripts/ensure-helm.sh)
#   libwool_kubernetes-<v>-py3-none-any.whl            the Python package for Wool applications
#                                                      (integrations/libwool-kubernetes)
#
#   scripts/release-kubernetes.sh DIST [PYTHON]   (PYTHON: an interpreter with setuptools 80.9.0,
#                                                  default scripts/ensure-release-python.sh's)
#   scripts/release-kubernetes.sh --chart DIR     only the chart (the Kubernetes suite installs it)
#
# Each is built from a copy of its source, so nothing is left in the checkout; timestamps come
# from SOURCE_DATE_EPOCH (the last commit's time by default).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
log() { echo "release-kubernetes: $*" >&2; }
export SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct)}"

chart() { # DIR: helm package of charts/wool-scaler into DIR; prints the archive's path
    local dir=$1 helm out
    helm="$(./scripts/ensure-helm.sh)"
    mkdir -p "$dir"
    out="$("$helm" package charts/wool-scaler --destination "$dir")"
    log "$out"
    echo "$dir/$(basename "${out##* }")"
}

if [[ "${1:-}" == "--chart" ]]; then
    chart "${2:?usage: release-kubernetes.sh --chart DIR}"
    exit 0
fi
DIST="$(cd "${1:?usage: release-kubernetes.sh DIST [PYTHON]}" && pwd)"
PY="${2:-$(./scripts/ensure-release-python.sh)}"

LIBWOOL_DIST="$DIST" ./scripts/images.sh >/dev/null
chart "$DIST" >/dev/null

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cp -r integrations/libwool-kubernetes/{pyproject.toml,README.md,LICENSE,src} "$work/"
(cd "$work" && "$PY" -c 'import sys; from setuptools import build_meta as b; print(b.build_wheel(sys.argv[1]))' \
    "$DIST" >"$work.log" 2>&1) || { cat "$work.log" >&2; rm -f "$work.log"; exit 1; }
rm -f "$work.log"
log "$(cd "$DIST" && ls libwool_kubernetes-*.whl)"
