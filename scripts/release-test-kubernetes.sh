#!/usr/bin/env bash
# Checks the Kubernetes files of a release (scripts/release-kubernetes.sh) as users take them,
# outside the checkout, with no Rust on PATH:
#
#   scripts/release-test-kubernetes.sh <dist> <wool-worker-binary>
#
#   1. each image archive's manifest digest (its index.json) is the one its .digest file gives;
#   2. the chart archive lints and renders the Wool application's documented values (the
#      pinned Helm; `helm install` of it on the API server is the Kubernetes suite's `packaged`);
#   3. the libwool_kubernetes wheel installs with wool==0.15.7 into a fresh venv and its
#      entrypoint serves: `wool-pod-worker` started, /readyz 200, SIGTERM, exit 0.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
log() { echo "release-test-kubernetes: $*" >&2; }
fail() { log "FAIL: $*"; exit 1; }
[[ $# -eq 2 ]] || fail "usage: $0 <dist> <wool-worker-binary>"
DIST="$(cd "$1" && pwd)" || fail "no dist directory $1"
HELM="$("$ROOT/scripts/ensure-helm.sh")"
PYTHON="$(command -v python3)"
work="$(mktemp -d)"
trap 'kill "${pid:-0}" 2>/dev/null || true; rm -rf "$work"' EXIT
cd "$work"
PATH="$(tr ':' '\n' <<<"$PATH" | grep -v -e '\.cargo' -e '\.rustup' | paste -sd:)"
! command -v cargo >/dev/null || fail "cargo is still on PATH"

for image in wool-worker wool-scaler; do
    archive="$(ls "$DIST/$image"-*.oci.tar)" || fail "no $image archive in $DIST"
    want="$(cat "${archive%.oci.tar}.digest")"
    have="$(tar -xOf "$archive" index.json | jq -r '.manifests[0].digest')"
    [[ "$have" == "$want" ]] || fail "$archive: manifest $have, its .digest says $want"
    log "ok: $(basename "$archive") $have"
done

chart="$(ls "$DIST"/wool-scaler-*.tgz)" || fail "no chart archive in $DIST"
"$HELM" lint "$chart" >lint.log 2>&1 || { cat lint.log >&2; fail "helm lint $chart"; }
"$HELM" template wool "$chart" -f "$ROOT/charts/wool-scaler/ci/wool-workers-values.yaml" >rendered.yaml ||
    fail "helm template $chart"
grep -q 'wool.libwool.dev/version: "0.15.7"' rendered.yaml || fail "the rendered workers carry no Wool version"
log "ok: $(basename "$chart") lints and renders ($(grep -c '^kind:' rendered.yaml) objects)"

wheel="$(ls "$DIST"/libwool_kubernetes-*-py3-none-any.whl)" || fail "no libwool_kubernetes wheel in $DIST"
"$PYTHON" -m venv venv
venv/bin/pip install -q --disable-pip-version-check "$wheel" "wool==0.15.7" >pip.log 2>&1 ||
    { cat pip.log >&2; fail "pip install $wheel"; }
mkdir app && printf 'import wool\n\n@wool.routine\nasync def ping() -> str:\n    return "pong"\n' >app/released_app.py
port="$(venv/bin/python -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
PYTHONPATH=app venv/bin/wool-pod-worker --import released_app --host 127.0.0.1 --port 0 \
    --health-port "$port" --grace 5 2>worker.log &
pid=$!
for _ in $(seq 600); do
    venv/bin/python -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$port/readyz', timeout=1)" 2>/dev/null && break
    kill -0 "$pid" 2>/dev/null || { cat worker.log >&2; fail "wool-pod-worker exited before it was ready"; }
    sleep 0.1
done
kill -TERM "$pid"
wait "$pid" || { cat worker.log >&2; fail "wool-pod-worker did not exit 0 after SIGTERM"; }
grep -q "drained" worker.log || { cat worker.log >&2; fail "wool-pod-worker logged no drain"; }
log "ok: $(basename "$wheel") installed; wool-pod-worker ready, then drained and exited 0 on SIGTERM"
