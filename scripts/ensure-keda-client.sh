#!/usr/bin/env bash
# Builds tests/keda (KEDA's own generated external-scaler client, github.com/kedacore/keda/v2
# pinned in its go.mod, over grpc-go) into <tools>/bin/keda-client
# (<tools>: scripts/tools-dir.sh): the real KEDA-side
# client tests/integration/scaler.rs drives wool-scaler with. Modules come from the Go module proxy.
# Idempotent (go build's cache makes a rebuild cheap); prints the path.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
. "$ROOT/scripts/tools-dir.sh"
BIN="$TOOLS_DIR/bin"
command -v go >/dev/null || { echo "ensure-keda-client: go is needed to build the KEDA client" >&2; exit 1; }
mkdir -p "$BIN"
(cd "$ROOT/tests/keda" && go build -mod=readonly -o "$BIN/keda-client" .) >&2
echo "$BIN/keda-client"
