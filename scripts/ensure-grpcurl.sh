#!/usr/bin/env bash
# Makes sure the pinned grpcurl (github.com/fullstorydev/grpcurl) is at <tools>/bin/grpcurl
# (<tools>: scripts/tools-dir.sh),
# built with `go install` from the Go module proxy: the real reflection client the worker's
# server-reflection test drives (tests/integration/operable.rs). Idempotent; prints the path.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
GRPCURL_VERSION=v1.9.3
. "$ROOT/scripts/tools-dir.sh"
BIN="$TOOLS_DIR/bin"
MARKER="$BIN/.grpcurl-version"   # go install builds report no version of their own
if [[ -x "$BIN/grpcurl" && -f "$MARKER" && "$(cat "$MARKER")" == "$GRPCURL_VERSION" ]]; then
    echo "$BIN/grpcurl"
    exit 0
fi
command -v go >/dev/null || { echo "ensure-grpcurl: go is needed to build grpcurl" >&2; exit 1; }
mkdir -p "$BIN"
echo "ensure-grpcurl: building grpcurl $GRPCURL_VERSION" >&2
GOBIN="$BIN" go install "github.com/fullstorydev/grpcurl/cmd/grpcurl@$GRPCURL_VERSION" >&2
printf '%s' "$GRPCURL_VERSION" > "$MARKER"
echo "$BIN/grpcurl"
