#!/usr/bin/env bash
# Builds the pinned engine scripts/e2e-kubernetes.sh runs into <tools>/engine
# (<tools>: scripts/tools-dir.sh, ~/.cache/libwool/tools by default), all from the
# Go module proxy (modules and sums pinned in tests/engine/*/go.mod and go.sum):
#   etcd v3.6.13 (tests/engine/etcd: a main over go.etcd.io/etcd/server/v3/etcdmain),
#   kube-apiserver, kube-controller-manager v1.36.3 (tests/engine/kube: k8s.io/kubernetes
#   with its staging modules pinned to v0.36.3), KEDA v2.21.0's operator and metrics adapter
#   (tests/engine/keda), and KEDA's CRDs (config/crd/bases of the KEDA module).
# About 13-15 minutes from nothing on 2 cores (module cache ~2.5 GB, build cache ~6 GB); when the
# stamp (a hash of the go.mod/go.sum files, this script and the Go version) matches, it only
# checks the binaries are there: a second or so. Prints the engine directory.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
. "$ROOT/scripts/tools-dir.sh"
OUT="$TOOLS_DIR/engine"
BIN="$OUT/bin"
MODS="$ROOT/tests/engine"
KUBE_VERSION=v1.36.3
KEDA_VERSION=v2.21.0
TOOLS=(etcd kube-apiserver kube-controller-manager keda-operator keda-adapter)

command -v go >/dev/null || { echo "ensure-engine: go is needed to build the engine" >&2; exit 1; }
stamp="$(cat "$MODS"/*/go.mod "$MODS"/*/go.sum "$MODS"/etcd/main.go "${BASH_SOURCE[0]}" | sha256sum | cut -d' ' -f1) $(go env GOVERSION)"
have_all() {
    local t
    for t in "${TOOLS[@]}"; do [[ -x "$BIN/$t" ]] || return 1; done
    [[ -f "$OUT/crds/keda.sh_scaledobjects.yaml" ]]
}
if have_all && [[ -f "$OUT/.stamp" && "$(cat "$OUT/.stamp")" == "$stamp" ]]; then
    echo "$OUT"
    exit 0
fi

mkdir -p "$BIN"
rm -f "$OUT/.stamp"
export GOFLAGS="-mod=readonly -buildvcs=false"
export CGO_ENABLED=0
if [[ -n "${CI:-}" ]]; then
    # On CI the engine's build cache (~6 GB) is its own and deleted once the binaries are built,
    # to spare a small disk (as the fuzz and sanitizer suites delete their builds).
    export GOCACHE="$TOOLS_DIR/engine-gocache"
    trap 'rm -rf "$GOCACHE"' EXIT
fi
started=$SECONDS
step() { # name dir package output [ldflags]
    local t0=$SECONDS
    echo "ensure-engine: building $1" >&2
    # -s -w: no symbol table or DWARF (the linker's largest job for binaries of 130-250 MB);
    # panics still print file:line stacks. -trimpath: no build paths inside.
    (cd "$2" && go build -trimpath -ldflags "-s -w ${5:-}" -o "$4" "$3") >&2
    echo "ensure-engine: $1 built in $((SECONDS - t0)) s ($(du -h "$4" | cut -f1))" >&2
}
step "etcd v3.6.13" "$MODS/etcd" . "$BIN/etcd"
# Version stamping as Kubernetes' own build does: clients cannot parse an unstamped server version.
kv="k8s.io/component-base/version"
cv="k8s.io/client-go/pkg/version"
major=${KUBE_VERSION#v}; minor=${major#*.}; minor=${minor%%.*}; major=${major%%.*}
kflags=""
for p in "$kv" "$cv"; do
    kflags+=" -X $p.gitVersion=$KUBE_VERSION -X $p.gitMajor=$major -X $p.gitMinor=$minor"
    kflags+=" -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
done
for c in kube-apiserver kube-controller-manager; do
    step "$c $KUBE_VERSION" "$MODS/kube" "k8s.io/kubernetes/cmd/$c" "$BIN/$c" "$kflags"
done
kedaflags="-X github.com/kedacore/keda/v2/version.Version=$KEDA_VERSION"
step "keda operator $KEDA_VERSION" "$MODS/keda" github.com/kedacore/keda/v2/cmd/operator "$BIN/keda-operator" "$kedaflags"
step "keda metrics adapter $KEDA_VERSION" "$MODS/keda" github.com/kedacore/keda/v2/cmd/adapter "$BIN/keda-adapter" "$kedaflags"
kdir="$(cd "$MODS/keda" && go list -m -f '{{.Dir}}' github.com/kedacore/keda/v2)"
rm -rf "$OUT/crds"
mkdir -p "$OUT/crds"
cp "$kdir"/config/crd/bases/*.yaml "$OUT/crds/"
chmod u+w "$OUT"/crds/*.yaml
printf '%s' "$stamp" > "$OUT/.stamp"
echo "ensure-engine: engine built in $((SECONDS - started)) s" >&2
echo "$OUT"
