#!/usr/bin/env bash
# Makes sure the pinned Helm (helm.sh/helm/v4 v4.3.2) is at <tools>/helm/bin/helm (<tools>:
# scripts/tools-dir.sh), built with `go install` from the Go module proxy (helm's own go.mod and
# go.sum pin its dependencies), with the version stamped as Helm's Makefile does. It renders and
# lints charts/wool-scaler (scripts/helm-test.sh) and the manifests scripts/e2e-kubernetes.sh
# applies. About 2-3 minutes from nothing on 2 cores; when the stamp (this script and the Go
# version) matches, it only checks the binary is there. Prints the path of the binary.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
HELM_VERSION=v4.3.2
. "$ROOT/scripts/tools-dir.sh"
OUT="$TOOLS_DIR/helm"
BIN="$OUT/bin"
command -v go >/dev/null || { echo "ensure-helm: go is needed to build helm" >&2; exit 1; }
stamp="$(sha256sum < "${BASH_SOURCE[0]}" | cut -d' ' -f1) $(go env GOVERSION)"
if [[ -x "$BIN/helm" && -f "$OUT/.stamp" && "$(cat "$OUT/.stamp")" == "$stamp" ]]; then
    echo "$BIN/helm"
    exit 0
fi
mkdir -p "$BIN"
rm -f "$OUT/.stamp"
started=$SECONDS
echo "ensure-helm: building helm $HELM_VERSION" >&2
v=helm.sh/helm/v4/internal/version
CGO_ENABLED=0 GOFLAGS="-buildvcs=false" GOBIN="$BIN" go install -trimpath \
    -ldflags "-s -w -X $v.version=$HELM_VERSION -X $v.metadata= -X $v.gitTreeState=clean" \
    "helm.sh/helm/v4/cmd/helm@$HELM_VERSION" >&2
"$BIN/helm" version --short | grep -qx "$HELM_VERSION.*" ||
    { echo "ensure-helm: the built helm reports $("$BIN/helm" version --short), not $HELM_VERSION" >&2; exit 1; }
printf '%s' "$stamp" > "$OUT/.stamp"
echo "ensure-helm: helm $HELM_VERSION built in $((SECONDS - started)) s ($(du -h "$BIN/helm" | cut -f1))" >&2
echo "$BIN/helm"
