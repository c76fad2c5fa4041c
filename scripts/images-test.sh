#!/usr/bin/env bash
# Tests the images scripts/images.sh saved under dist/ as a container runtime would run them,
# without one (`podman run` cannot set its rlimits inside this kind of sandbox): each OCI archive
# is unpacked with umoci into a runtime bundle (its root filesystem and config.json, the image's
# user, entrypoint and command), and the entrypoint is started from that root filesystem
# (chroot, mounted read-only) as the image's user, in a network namespace the test makes, with
# the image's own default command (its EXPOSEd ports). Then, from the host's side:
#   - the image: FROM scratch with the one static binary, user 65532:65532, STOPSIGNAL SIGTERM,
#     the EXPOSEd ports, the OCI labels;
#   - wool-worker: its process runs as UID/GID 65532 with no capabilities, answers `woolctl idle`
#     and its metrics, and `woolctl stop` ends it with exit status 0;
#   - wool-scaler: answers KEDA's own external-scaler client (scripts/ensure-keda-client.sh:
#     GetMetricSpec, GetMetrics, IsActive) for a fleet of one worker, serves its health port and
#     metrics, and SIGTERM from the host ends it with exit status 0.
# Prints the archives' compressed and unpacked sizes. Needs root (chroot, mounts, `ip netns`).
#   ./scripts/images-test.sh      (builds the images first when dist/ lacks them)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
say() { printf '%s  images-test  %s\n' "$(date -u +%T.%3N)" "$*" >&2; }
fails=0
check() { # description command...
    local what=$1; shift
    if "$@"; then echo "    ok: $what"; else echo "    FAILED: $what"; fails=$((fails + 1)); fi
}

[[ $(id -u) == 0 ]] || { say "needs root: chroot, a read-only bind mount and a network namespace"; exit 1; }
for tool in umoci ip jq curl; do
    command -v "$tool" >/dev/null || { say "$tool is needed (.ci/run installs it)"; exit 1; }
done
VERSION="$(sed -n 's/^version = "\(.*\)"$/\1/p' cli/wool-scaler/Cargo.toml | head -1)"
if [[ ! -f "dist/wool-worker-$VERSION.oci.tar" || ! -f "dist/wool-scaler-$VERSION.oci.tar" ]]; then
    ./scripts/images.sh >/dev/null
fi
# woolctl and a worker for the scaler's fleet, from the debug build test.sh's setup makes
cargo build -q --workspace --lib --bins --examples >&2
WOOLCTL="$ROOT/target/debug/woolctl"
KEDA="$(./scripts/ensure-keda-client.sh)"

TMP="$(mktemp -d /tmp/wool-images.XXXXXX)"
NETNS="wool-images-$$"
PIDS=()
cleanup() {
    local rc=$? pid
    for pid in "${PIDS[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
    ip netns del "$NETNS" 2>/dev/null || true
    rm -rf "$TMP"
    exit $rc
}
trap cleanup EXIT
ip netns add "$NETNS"
ip -n "$NETNS" link set lo up
in_ns() { ip netns exec "$NETNS" "$@"; }

unpack() { # name: dist/<name>-<version>.oci.tar -> $TMP/<name>/bundle (rootfs, config.json)
    local name=$1 archive="dist/$1-$VERSION.oci.tar"
    mkdir -p "$TMP/$name/layout"
    tar -xf "$archive" -C "$TMP/$name/layout"
    umoci unpack --image "$TMP/$name/layout:$VERSION" "$TMP/$name/bundle" >/dev/null
    local manifest config
    manifest="$(jq -r '.manifests[0].digest' "$TMP/$name/layout/index.json" | sed 's/^sha256://')"
    config="$(jq -r '.config.digest' "$TMP/$name/layout/blobs/sha256/$manifest" | sed 's/^sha256://')"
    cp "$TMP/$name/layout/blobs/sha256/$config" "$TMP/$name/image-config.json"
    echo "  $name: compressed $(du -k "$archive" | cut -f1) KiB ($(du -b "$archive" | cut -f1) bytes)," \
        "unpacked $(du -sk "$TMP/$name/bundle/rootfs" | cut -f1) KiB; digest sha256:$manifest"
    check "$name: the archive's digest is dist/$name-$VERSION.digest's" \
        test "sha256:$manifest" = "$(cat "dist/$name-$VERSION.digest")"
}

image_checks() { # name ports...
    local name=$1; shift
    local c="$TMP/$name/image-config.json" b="$TMP/$name/bundle/config.json"
    check "$name: the root filesystem holds only /$name (no shell, no libc)" \
        test "$(cd "$TMP/$name/bundle/rootfs" && find . -mindepth 1 | sort | tr '\n' ' ')" = "./$name "
    check "$name: /$name is a static executable" sh -c "file -b '$TMP/$name/bundle/rootfs/$name' | grep -Eq 'statically linked|static-pie linked'"
    check "$name: user 65532:65532" test "$(jq -r .config.User "$c")" = 65532:65532
    check "$name: the bundle runs as uid 65532 gid 65532" \
        test "$(jq -r '"\(.process.user.uid):\(.process.user.gid)"' "$b")" = 65532:65532
    check "$name: STOPSIGNAL SIGTERM" test "$(jq -r .config.StopSignal "$c")" = SIGTERM
    local want; want="$(printf '%s/tcp\n' "$@" | sort | tr '\n' ' ')"
    check "$name: EXPOSE $*" test "$(jq -r '.config.ExposedPorts | keys[]' "$c" | sort | tr '\n' ' ')" = "$want"
    local label
    for label in source version revision licenses; do
        check "$name: label org.opencontainers.image.$label ($(jq -r ".config.Labels[\"org.opencontainers.image.$label\"]" "$c"))" \
            test -n "$(jq -r ".config.Labels[\"org.opencontainers.image.$label\"] // empty" "$c")"
    done
    check "$name: label version is $VERSION" \
        test "$(jq -r '.config.Labels["org.opencontainers.image.version"]' "$c")" = "$VERSION"
}

# run name: starts the bundle's process (config.json's args, user, cwd) from its root filesystem,
# mounted read-only, in the network namespace; sets PID (the same process all the way: every
# step execs the next). stdout to $TMP/<name>.out, stderr to $TMP/<name>.log.
run() {
    local name=$1 b="$TMP/$1/bundle"
    local uid gid cwd args=()
    uid="$(jq -r .process.user.uid "$b/config.json")"
    gid="$(jq -r .process.user.gid "$b/config.json")"
    cwd="$(jq -r '.process.cwd // "/"' "$b/config.json")"
    mapfile -t args < <(jq -r '.process.args[]' "$b/config.json")
    say "$name: starting ${args[*]} as $uid:$gid"
    # (ip netns exec, unshare, sh, setpriv and chroot each exec the next: $! is the program's pid)
    ip netns exec "$NETNS" unshare --mount --propagation private -- sh -c '
        rootfs=$1 user=$2 cwd=$3; shift 3
        mount --bind "$rootfs" "$rootfs" && mount -o remount,bind,ro "$rootfs" &&
            cd "$rootfs$cwd" && exec setpriv --no-new-privs chroot --userspec="$user" --groups="${user#*:}" "$rootfs" "$@"' \
        sh "$b/rootfs" "$uid:$gid" "$cwd" "${args[@]}" > "$TMP/$name.out" 2> "$TMP/$name.log" < /dev/null &
    PID=$!
    PIDS+=("$PID")
}
holds() { jq -e "$2" <<<"$1" >/dev/null 2>&1; }   # json jq-condition
status_field() { awk -v f="$2:" '$1 == f { $1 = ""; print substr($0, 2) }' "/proc/$1/status"; }
process_checks() { # name pid
    local name=$1 pid=$2
    check "$name: the process is /$name of the unpacked root filesystem" \
        test "$(readlink "/proc/$pid/root")" = "$TMP/$name/bundle/rootfs"
    check "$name: runs as UID 65532 ($(status_field "$pid" Uid))" test "$(status_field "$pid" Uid | tr -s ' \t' ' ')" = "65532 65532 65532 65532"
    check "$name: and GID 65532 ($(status_field "$pid" Gid))" test "$(status_field "$pid" Gid | tr -s ' \t' ' ')" = "65532 65532 65532 65532"
    check "$name: with no capabilities (CapEff $(status_field "$pid" CapEff))" test "$(status_field "$pid" CapEff)" = 0000000000000000
    # /proc/PID/mountinfo as the process sees it: its root is the bind mount, "ro"
    check "$name: its root filesystem is read-only" \
        awk '$5 == "/" && $6 ~ /(^|,)ro(,|$)/ { f = 1 } END { exit !f }' "/proc/$pid/mountinfo"
}
wait_for() { # seconds what command...
    local limit=$1 what=$2; shift 2
    local until=$((SECONDS + limit))
    while ! "$@" >/dev/null 2>&1; do
        if ((SECONDS >= until)); then say "timed out after ${limit}s waiting for $what"; return 1; fi
        sleep 0.2
    done
}
exit_status() { # pid seconds: waits for it to exit; sets RC to its status (or "running")
    local pid=$1 limit=$2
    for _ in $(seq $((limit * 5))); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    if kill -0 "$pid" 2>/dev/null; then RC=running; return; fi
    RC=0
    wait "$pid" || RC=$?
}

echo "== the images (dist/, version $VERSION)"
unpack wool-worker
unpack wool-scaler
image_checks wool-worker 50051 8081 9100
image_checks wool-scaler 9090 8081 9100

echo "== wool-worker's image, run from its root filesystem"
run wool-worker
worker=$PID
wait_for 20 "wool-worker's address line" test -s "$TMP/wool-worker.out" || { cat "$TMP/wool-worker.log" >&2; exit 1; }
process_checks wool-worker "$worker"
idle="$(in_ns "$WOOLCTL" --output json idle 127.0.0.1:50051 2>&1 || true)"
echo "    woolctl idle: $idle"
check "wool-worker: answers idle on 50051 (its default command's port)" holds "$idle" '.ok and (.idle_seconds | numbers)'
check "wool-worker: serves metrics on 9100" sh -c "ip netns exec '$NETNS' curl -sf http://127.0.0.1:9100/metrics | grep -q '^wool_worker_'"
stop="$(in_ns "$WOOLCTL" --output json stop --grace 5 127.0.0.1:50051 2>&1 || true)"
echo "    woolctl stop: $stop"
exit_status "$worker" 15
check "wool-worker: woolctl stop ends it with exit status 0 (got $RC)" test "$RC" = 0

echo "== wool-scaler's image, run from its root filesystem"
# Its fleet: one worker of the host's build, in the same network namespace.
ip netns exec "$NETNS" "$ROOT/target/debug/wool-worker" --listen 127.0.0.1:0 > "$TMP/fleet.out" 2> "$TMP/fleet.log" &
fleet=$!
PIDS+=("$fleet")
wait_for 20 "the fleet's worker" test -s "$TMP/fleet.out"
target="$(head -1 "$TMP/fleet.out")"
run wool-scaler
scaler=$PID
wait_for 20 "wool-scaler's address line" test -s "$TMP/wool-scaler.out" || { cat "$TMP/wool-scaler.log" >&2; exit 1; }
process_checks wool-scaler "$scaler"
answer="$(in_ns "$KEDA" poll --address 127.0.0.1:9090 --name images --meta "targets=$target" --meta idleThreshold=1h 2>&1 || true)"
echo "    KEDA's client, poll (GetMetricSpec, GetMetrics, IsActive): $answer"
check "wool-scaler: answers KEDA's client on 9090: metric wool-busy-workers 1 (a worker idle for less than 1 h)" \
    holds "$answer" '.values[0].metricName == "wool-busy-workers" and .values[0].metricValueFloat == 1'
check "wool-scaler: and IsActive true" holds "$answer" '.active == true'
check "wool-scaler: serves metrics on 9100 (its calls counted)" \
    sh -c "ip netns exec '$NETNS' curl -sf http://127.0.0.1:9100/metrics | grep -q '^wool_scaler_calls_total{rpc=\"IsActive\"'"
check "wool-scaler: listens on its health port 8081 (what the liveness probe checks)" \
    ip netns exec "$NETNS" bash -c 'exec 3<>/dev/tcp/127.0.0.1/8081'
kill -TERM "$scaler"
exit_status "$scaler" 15
check "wool-scaler: SIGTERM (the image's STOPSIGNAL) from the host ends it with exit status 0 (got $RC)" test "$RC" = 0
kill -TERM "$fleet"
exit_status "$fleet" 15

if ((fails)); then
    say "$fails check(s) failed; logs:"
    for f in "$TMP"/*.log; do echo "--- $f" >&2; tail -n 20 "$f" >&2; done
    exit 1
fi
echo "every image check passed"
