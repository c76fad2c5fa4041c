#!/usr/bin/env bash
# Builds the container images of wool-worker and wool-scaler, offline, and saves each as an OCI
# archive under dist/:
#   dist/wool-worker-<version>.oci.tar, dist/wool-scaler-<version>.oci.tar
#   dist/<image>-<version>.digest   the image's manifest digest (sha256:…), what the chart's
#                                   `image.digest` / `workers.image.digest` take
#
# Each image is `FROM scratch` holding one static binary and nothing else (no shell, no libc, no
# CA bundle: TLS material comes from mounted files): the program built for
# x86_64-unknown-linux-musl (musl links statically, and its resolver reads /etc/resolv.conf and
# /etc/hosts itself, which Kubernetes mounts; glibc linked statically still loads NSS modules at
# run time for name lookups, which a scratch image does not have), release profile without debug
# information, symbols stripped. It runs as UID/GID 65532 (distroless's "nonroot"), stops on
# SIGTERM, exposes the ports of its default command (worker: 50051 gRPC, 8081 health, 9100
# metrics; scaler: 9090 gRPC, 8081 health, 9100 metrics) and carries the OCI labels source,
# version, revision, licenses, title and description.
#
# Builder: Debian bookworm's buildah 1.28.2 (daemonless; `.ci/run` installs it), with its own
# storage under target/images (nothing in the machine's shared image store). `FROM scratch`
# needs no registry. The build is reproducible: timestamps come from SOURCE_DATE_EPOCH (the
# last commit's time by default), so the same commit gives the same digests.
#   ./scripts/images.sh          both images; prints each archive's path and digest
#   (LIBWOOL_DIST=DIR: into DIR instead of dist/)
# The images are tested by scripts/images-test.sh (each one's root filesystem run as UID 65532).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
BUILDAH_VERSION=1.28.2
TRIPLE=x86_64-unknown-linux-musl
# The static build lives in the builds cache (scripts/tools-dir.sh), reused by later runs of any
# clone (only this workspace's crates are built again); LIBWOOL_STATIC_TARGET overrides it.
. "$ROOT/scripts/tools-dir.sh"
trim_builds
TARGET_DIR="${LIBWOOL_STATIC_TARGET:-$BUILDS_DIR/static}"
STORE="$ROOT/target/images"
DIST="${LIBWOOL_DIST:-$ROOT/dist}"    # scripts/release-kubernetes.sh names the release's
say() { echo "images: $*" >&2; }

command -v buildah >/dev/null ||
    { say "buildah is needed (Debian bookworm: apt-get install buildah=$BUILDAH_VERSION*; .ci/run installs it)"; exit 1; }
have="$(buildah --version | awk '{print $3}')"
[[ "$have" == "$BUILDAH_VERSION" ]] ||
    { say "buildah $BUILDAH_VERSION is pinned (Debian bookworm's), this machine has $have"; exit 1; }
command -v musl-gcc >/dev/null ||
    { say "musl-gcc is needed for the static build (Debian: apt-get install musl-tools; .ci/run installs it)"; exit 1; }
rustup target list --installed 2>/dev/null | grep -qx "$TRIPLE" || rustup target add "$TRIPLE" >&2

VERSION="$(sed -n 's/^version = "\(.*\)"$/\1/p' cli/wool-scaler/Cargo.toml | head -1)"
REVISION="$(git rev-parse HEAD 2>/dev/null || echo unknown)"
git diff --quiet HEAD 2>/dev/null || REVISION+="-dirty"
EPOCH="${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}"
SOURCE="$(sed -n 's/^repository = "\(.*\)"$/\1/p' Cargo.toml | head -1)"
LICENSE="$(sed -n 's/^license = "\(.*\)"$/\1/p' Cargo.toml | head -1)"

started=$SECONDS
# The release profile of Cargo.toml keeps debug information for the benchmarks' profiles; the
# images take it out here, and the target triple and directory keep these builds apart.
# SOURCE_DATE_EPOCH is kept from cargo: ring's build script runs again whenever it changes.
env -u SOURCE_DATE_EPOCH CARGO_PROFILE_RELEASE_DEBUG=0 CARGO_PROFILE_RELEASE_STRIP=symbols \
    cargo build --release --locked --target "$TRIPLE" --target-dir "$TARGET_DIR" \
    -p wool-worker -p wool-scaler >&2
say "static binaries built in $((SECONDS - started)) s"

B=(buildah --root "$STORE/root" --runroot "$STORE/run" --storage-driver vfs)
mkdir -p "$DIST" "$STORE"
CTX="$(mktemp -d "$STORE/context.XXXXXX")"
trap 'rm -rf "$CTX"' EXIT

image() { # name description ports...
    local name=$1 description=$2; shift 2
    local bin="$TARGET_DIR/$TRIPLE/release/$name" ports=("$@")
    file "$bin" | grep -Eq 'statically linked|static-pie linked' || { say "$bin is not statically linked: $(file -b "$bin")"; exit 1; }
    rm -rf "${CTX:?}"/*
    cp "$bin" "$CTX/$name"
    local cmd
    case $name in
        wool-worker) cmd='"--listen", "0.0.0.0:50051", "--health-listen", "0.0.0.0:8081", "--metrics-listen", "0.0.0.0:9100", "--log-format", "json"' ;;
        wool-scaler) cmd='"--listen", "0.0.0.0:9090", "--health-listen", "0.0.0.0:8081", "--metrics-listen", "0.0.0.0:9100", "--log-format", "json"' ;;
    esac
    cat > "$CTX/Containerfile" <<EOF
FROM scratch
COPY --chown=0:0 --chmod=0555 $name /$name
USER 65532:65532
EXPOSE ${ports[*]}
STOPSIGNAL SIGTERM
LABEL org.opencontainers.image.source="$SOURCE" \\
      org.opencontainers.image.version="$VERSION" \\
      org.opencontainers.image.revision="$REVISION" \\
      org.opencontainers.image.licenses="$LICENSE" \\
      org.opencontainers.image.title="$name" \\
      org.opencontainers.image.description="$description"
ENTRYPOINT ["/$name"]
CMD [$cmd]
EOF
    local ref="localhost/$name:$VERSION" archive="$DIST/$name-$VERSION.oci.tar"
    "${B[@]}" rmi -f "$ref" >/dev/null 2>&1 || true
    "${B[@]}" build --quiet --timestamp "$EPOCH" --layers=false --network none \
        -f "$CTX/Containerfile" -t "$ref" "$CTX" >/dev/null
    rm -f "$archive"
    "${B[@]}" push --quiet --digestfile "$DIST/$name-$VERSION.digest" "$ref" "oci-archive:$archive:$VERSION" >&2
    "${B[@]}" rmi -f "$ref" >/dev/null
    say "$name $VERSION: $archive ($(du -k "$archive" | cut -f1) KiB, binary $(du -k "$bin" | cut -f1) KiB) $(cat "$DIST/$name-$VERSION.digest")"
    echo "$archive $(cat "$DIST/$name-$VERSION.digest")"
}
image wool-worker "libwool's reference Wool worker" 50051 8081 9100
image wool-scaler "A KEDA external scaler for Wool fleets, on the workers' idle time" 9090 8081 9100
say "done in $((SECONDS - started)) s"
