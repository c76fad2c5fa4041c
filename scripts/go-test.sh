#!/usr/bin/env bash
# Runs the Go binding's tests with the race detector against real workers and the workspace's
# own libwool (target/debug/libwool.so and libwool.a, described by a wool.pc this script writes
# beside them), found through pkg-config as a user who installs libwool system-wide would have
# it (build tag woolpkgconfig: a checkout holds no prebuilt libwool.a, which only the released
# module carries; scripts/release-test-go.sh tests that default build from the release, and
# scripts/consumers-test.sh an install made with cargo-c):
#   1. bindings/go (the binding, module github.com/libwool/libwool/bindings/go), examples/go
#      (the example programs, their own module) and benches/harness (what the Go benchmark
#      drivers share): go vet, gofmt, go test -race, with -tags woolpkgconfig; the drivers
#      benches/go and benches/grpc-go vetted and built (grpc-go's own test run);
#   2. a consumer module outside the repository (a temporary directory made from
#      bindings/go/testdata/consumer: a go.mod requiring the binding, replaced by this
#      checkout's bindings/go, no network needed): go vet, go test -race (-tags
#      woolpkgconfig), then the same test built with -tags woolstatic, checked to need no
#      libwool.so, and run without LD_LIBRARY_PATH.
#
#   ./scripts/go-test.sh [go test flags...]     e.g. -run TestMutualTLS -v (for step 1)
#
# Builds what they need first: libwool and the reference worker (cargo build, as the test
# command's set-up does, so nothing is built twice) and the pinned Wool virtual environments
# (scripts/setup-venvs.sh; idempotent) for the tests that talk to real Wool Python workers. The
# binding finds libwool through pkg-config (PKG_CONFIG_PATH=target/debug/pkgconfig) and the
# tests load it through LD_LIBRARY_PATH=target/debug. With WOOL_TEST_REQUIRE_PEERS=1 (the
# default here) a missing venv fails those tests instead of skipping them.
# Needs: cargo, go (>= 1.24) with cgo enabled, a C compiler, pkg-config, binutils (readelf, nm),
# python3 >= 3.11 (venvs).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

for tool in go pkg-config; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "go-test: $tool is not on PATH (the Go toolchain >= 1.24 and pkg-config are needed)" >&2
        exit 1
    fi
done
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
LIBDIR="$TARGET_DIR/debug"
cargo build --workspace --lib --bins --examples
./scripts/setup-venvs.sh >/dev/null

# wool.pc for the workspace's build: the checked-in header, the library cargo just built, and
# for a static link what libwool.a needs after it (rustc's native-static-libs on Linux glibc, as
# the release's wool.pc has them).
mkdir -p "$LIBDIR/pkgconfig"
cat >"$LIBDIR/pkgconfig/wool.pc" <<EOF
libdir=$LIBDIR
includedir=$ROOT/include

Name: wool
Description: libwool's C API, the workspace's debug build
Version: $(sed -n 's/^version = "\(.*\)"/\1/p' capi/Cargo.toml | head -1)
Libs: -L\${libdir} -lwool
Libs.private: -lgcc_s -lutil -lrt -lpthread -lm -ldl -lc
Cflags: -I\${includedir}
EOF

export CGO_ENABLED=1 WOOL_TEST_REQUIRE_PEERS="${WOOL_TEST_REQUIRE_PEERS:-1}"
export WOOL_WORKER="${WOOL_WORKER:-$TARGET_DIR/debug/wool-worker}"
export PKG_CONFIG_PATH="$LIBDIR/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
export LD_LIBRARY_PATH="$LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
echo "go-test: libwool $(pkg-config --modversion wool) from $(pkg-config --variable=libdir wool)"

# go vet, gofmt and go test -race in one module directory, linking libwool through pkg-config
# (-tags woolpkgconfig); extra arguments go to go test.
check_module() {
    local dir="$1"
    shift
    echo "go-test: $dir"
    (
        cd "$dir"
        go vet -tags woolpkgconfig ./...
        unformatted="$(gofmt -l .)"
        if [[ -n "$unformatted" ]]; then
            echo "go-test: not gofmt-formatted in $dir:" $unformatted >&2
            exit 1
        fi
        go test -race -count=1 -tags woolpkgconfig "$@" ./...
    )
}

check_module "$ROOT/bindings/go" "$@"
(cd bindings/go && go vet -tags woolstatic ./...) # link_static.go
check_module "$ROOT/examples/go" "$@"
# The benchmark drivers' shared harness (its own module, no libwool), and the two drivers that
# use it through replace directives: vetted and built as scripts/bench.sh builds them.
check_module "$ROOT/benches/harness"
(cd benches/go && go vet -tags woolpkgconfig ./... && go build -tags woolpkgconfig -o /dev/null .)
(cd benches/grpc-go && go vet ./... && go test -count=1 ./... && go build -o /dev/null .)

# The consumer: a module of its own outside the repository, as a stranger's would be.
CONSUMER="$(mktemp -d "${TMPDIR:-/tmp}/wool-go-consumer.XXXXXX")"
trap 'rm -rf "$CONSUMER"' EXIT
cp "$ROOT"/bindings/go/testdata/consumer/*.go "$CONSUMER/"
cat >"$CONSUMER/go.mod" <<EOF
module example.com/consumer

go 1.24

require github.com/libwool/libwool/bindings/go v0.0.0

replace github.com/libwool/libwool/bindings/go => $ROOT/bindings/go
EOF
(cd "$CONSUMER" && GOFLAGS=-mod=mod go mod tidy)
GOFLAGS=-mod=mod check_module "$CONSUMER"

echo "go-test: $CONSUMER with -tags woolstatic (libwool.a linked in)"
(
    cd "$CONSUMER"
    export GOFLAGS=-mod=mod
    go vet -tags woolstatic ./...
    go test -race -tags woolstatic -c -o consumer-static.test .
    needed="$(readelf -d consumer-static.test | grep NEEDED || true)"
    if grep -q libwool <<<"$needed"; then
        echo "go-test: the woolstatic build still needs libwool.so:" >&2
        echo "$needed" >&2
        exit 1
    fi
    # nm's output is taken whole first: `grep -q` quitting early would SIGPIPE nm under pipefail.
    symbols="$(nm consumer-static.test)"
    if ! grep -q ' T wool_version$' <<<"$symbols"; then
        echo "go-test: the woolstatic build does not contain libwool (no wool_version)" >&2
        exit 1
    fi
    echo "go-test: consumer-static.test contains libwool and needs only:" \
        $(sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' <<<"$needed")
    env -u LD_LIBRARY_PATH ./consumer-static.test -test.count=1
)
echo "go-test: all Go checks passed"
