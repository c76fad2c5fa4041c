#!/usr/bin/env bash
# The Kubernetes suite: wool-scaler driving a Deployment through the real engine. Builds the
# pinned engine (scripts/ensure-engine.sh: etcd v3.6.13, kube-apiserver/kube-controller-manager/
# kubectl v1.36.3, KEDA v2.21.0's operator and metrics adapter), then runs etcd, the API server,
# the HPA controller, KEDA's operator and its metrics adapter, wool-worker and wool-scaler
# processes and a real Wool 0.15.7 pool, all under one temp dir, and checks what KEDA does with
# the scaler's answers, by order and generous bounds (never exact times). For each case it prints
# a timeline: the scaler's answers (its metrics: the last IsActive and metric given, calls
# counted) and the Deployment's spec.replicas, sampled every second.
#
# Everything runs inside a network namespace the script makes (its loopback, plus a veth pair
# with 10.250.x addresses that exist only inside it: the API server refuses loopback addresses
# in the Endpoints of the metrics adapter's aggregated API). Without root or `ip` it runs on the
# host's loopback instead and skips the HPA case, saying so. A trap stops every process it
# started, whatever happens, and checks nothing it started is left listening.
#
# The manifests come from the Helm chart charts/wool-scaler, rendered by `helm template` (the
# pinned Helm of scripts/ensure-helm.sh) with tests/helm/e2e-values.yaml and each case's values
# (the scaler's address on this machine, the fleet, the timings), and are applied server-side;
# the last case applies the chart's default values and every documented combination. The
# Deployments name the images scripts/images.sh built, by digest; no kubelet runs, so no image
# is pulled: scripts/images-test.sh proves what the images hold runs and serves. No CNI runs
# either: KEDA and the HPA scale through the Deployment's scale subresource, and a NetworkPolicy
# is checked for the API server's acceptance only (enforcement needs a network plugin).
#   ./scripts/e2e-kubernetes.sh            every case
#   E2E_CASES="activation tls" ./scripts/e2e-kubernetes.sh   some of them
# The scaledown case (pods as the fleet, deletionCost) also runs kube-controller-manager's
# Deployment and ReplicaSet controllers and plays the kubelet's part for its pods' status
# (SCALEDOWN_RUNS, default 5, runs each with the option on and off). Not in the default list:
#   E2E_CASES=churn CHURN_MINUTES=10 ./scripts/e2e-kubernetes.sh   deletion-cost patches per
#   minute for 50 pods under a steady busy/idle mix (a measurement for docs/kubernetes.md)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

say() { printf '%s  e2e  %s\n' "$(date -u +%T.%3N)" "$*" >&2; }

if [[ "${WOOL_E2E_INSIDE:-}" != 1 ]]; then
    started=$SECONDS
    ENGINE="$(./scripts/ensure-engine.sh)"
    say "engine ready in $((SECONDS - started)) s: $ENGINE"
    WOOL_E2E_HELM="$(./scripts/ensure-helm.sh)"
    version="$(sed -n 's/^version = "\(.*\)"$/\1/p' cli/wool-scaler/Cargo.toml | head -1)"
    [[ -f "dist/wool-worker-$version.digest" && -f "dist/wool-scaler-$version.digest" ]] || ./scripts/images.sh >&2
    WOOL_E2E_WORKER_DIGEST="$(cat "dist/wool-worker-$version.digest")"
    WOOL_E2E_SCALER_DIGEST="$(cat "dist/wool-scaler-$version.digest")"
    say "images (dist/, scripts/images.sh): wool-worker $WOOL_E2E_WORKER_DIGEST, wool-scaler $WOOL_E2E_SCALER_DIGEST"
    export WOOL_E2E_HELM WOOL_E2E_WORKER_DIGEST WOOL_E2E_SCALER_DIGEST
    [[ -x target/venvs/wool-0.15.7/bin/python ]] || ./scripts/setup-venvs.sh >&2
    cargo build --workspace --bins --example burst >&2
    export WOOL_E2E_INSIDE=1 WOOL_E2E_ENGINE="$ENGINE"
    run_inner() { # pid: waits for the inner run; SIGINT/SIGTERM here reach it, and its trap stops everything
        local inner=$1
        trap 'kill -TERM "$inner" 2>/dev/null || true' INT TERM
        rc=0
        wait "$inner" || rc=$?
        if kill -0 "$inner" 2>/dev/null; then rc=0; wait "$inner" || rc=$?; fi
        trap - INT TERM
    }
    NETNS="wool-e2e-$$"
    if [[ $(id -u) == 0 ]] && command -v ip >/dev/null && ip netns add "$NETNS" 2>/dev/null; then
        trap 'ip netns del "$NETNS" 2>/dev/null || true; rm -rf "/etc/netns/$NETNS"' EXIT
        # inside, DNS goes to the namespace's loopback only (ip netns exec bind-mounts this file)
        mkdir -p "/etc/netns/$NETNS" && echo "nameserver 127.0.0.1" > "/etc/netns/$NETNS/resolv.conf"
        sub=$(( $$ % 250 ))
        ip -n "$NETNS" link set lo up
        ip -n "$NETNS" link add e2e-host type veth peer name e2e-agg
        ip -n "$NETNS" addr add "10.250.$sub.1/30" dev e2e-host
        ip -n "$NETNS" addr add "10.250.$sub.2/30" dev e2e-agg
        ip -n "$NETNS" link set e2e-host up
        ip -n "$NETNS" link set e2e-agg up
        export WOOL_E2E_AGG_IP="10.250.$sub.2"
        say "network namespace $NETNS: loopback, and 10.250.$sub.1-2 on a veth pair inside it"
        ip netns exec "$NETNS" "$0" "$@" &
        run_inner $!
        left="$(ip netns pids "$NETNS" 2>/dev/null || true)"
        if [[ -n "$left" ]]; then
            say "FAIL: processes left in the namespace: $left"; kill -KILL $left 2>/dev/null || true; rc=1
        fi
        say "suite finished in $((SECONDS - started)) s (rc $rc)"
        exit $rc
    fi
    say "no network namespace (needs root and iproute2): running on the host's loopback; the HPA case is skipped"
    export WOOL_E2E_AGG_IP=""
    "$0" "$@" &
    run_inner $!
    say "suite finished in $((SECONDS - started)) s (rc $rc)"
    exit $rc
fi

# ---------------------------------------------------------------- inside: the engine and cases
BIN="$WOOL_E2E_ENGINE/bin"
HELM="$WOOL_E2E_HELM"
WORKER_DIGEST="$WOOL_E2E_WORKER_DIGEST"
SCALER_DIGEST="$WOOL_E2E_SCALER_DIGEST"
AGG_IP="${WOOL_E2E_AGG_IP:-}"
TMP="$(mktemp -d /tmp/wool-e2e.XXXXXX)"
PIDS=()
NAMES=()
FAILS=()
RESULTS=()
export KUBECONFIG="$TMP/admin.kubeconfig"
PY="$ROOT/target/venvs/wool-0.15.7/bin/python"
WORKER="$ROOT/target/debug/wool-worker"
SCALER_BIN="$ROOT/target/debug/wool-scaler"
BURST="$ROOT/target/debug/examples/burst"

cleanup() {
    local rc=$? pid
    trap - EXIT INT TERM
    if [[ -n "${SAMPLER:-}" ]]; then kill "$SAMPLER" 2>/dev/null || true; fi
    # the last started first: clients before the API server, the API server before etcd
    local i
    for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do
        pid=${PIDS[$i]}
        kill -0 "$pid" 2>/dev/null || continue
        kill -TERM -- "-$pid" 2>/dev/null || true
        for _ in $(seq 75); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
        if kill -0 "$pid" 2>/dev/null; then
            say "${NAMES[$i]} (pid $pid) still running 15 s after SIGTERM: SIGKILL"
        fi
        kill -KILL -- "-$pid" 2>/dev/null || true
    done
    sleep 0.3
    local listening
    if [[ -n "${SAMPLER:-}" ]]; then kill "$SAMPLER" 2>/dev/null || true; fi
    if [[ -n "$AGG_IP" ]]; then   # our own network namespace: nothing at all may listen in it
        listening="$(ss -Hltnp 2>/dev/null || true)"
    else
        listening="$(ss -Hltnp 2>/dev/null | grep -E "$(printf 'pid=%s,|' "${PIDS[@]}")NONE" || true)"
    fi
    if [[ -n "$listening" ]]; then
        say "FAIL: still listening after the stop:"; echo "$listening" >&2; rc=1
    else
        say "stopped ${#PIDS[@]} processes; none of them is listening"
    fi
    if ((rc)) && [[ -z "${WOOL_E2E_KEEP:-}" ]]; then
        for f in "$TMP"/logs/*.log; do [[ -f "$f" ]] || continue; echo "--- tail of $f" >&2; tail -n 15 "$f" >&2; done
    fi
    [[ -n "${WOOL_E2E_KEEP:-}" ]] && say "kept $TMP" || rm -rf "$TMP"
    exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM
mkdir -p "$TMP/logs"

start() { # name command... : runs it in its own process group; stdout to logs/NAME.out, stderr to logs/NAME.log
    local name="$1"; shift
    setsid "$@" >"$TMP/logs/$name.out" 2>"$TMP/logs/$name.log" < /dev/null &
    PIDS+=("$!")
    NAMES+=("$name")
    eval "PID_${name//-/_}=$!"
}
stop() { # name: SIGTERM to its group, then wait
    local var="PID_${1//-/_}" pid
    pid="${!var}"
    kill -TERM -- "-$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.2; done
    kill -KILL -- "-$pid" 2>/dev/null || true
}
free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
wait_for() { # seconds description command...
    local limit=$1 what=$2; shift 2
    local until=$((SECONDS + limit))
    while ! "$@" >/dev/null 2>&1; do
        if ((SECONDS >= until)); then say "timed out after ${limit}s waiting for $what"; return 1; fi
        sleep 0.5
    done
}
first_line() { # file: waits for a first line and prints it
    for _ in $(seq 100); do [[ -s "$1" ]] && { head -1 "$1"; return 0; }; sleep 0.1; done
    return 1
}
now() { date +%s.%N | cut -c1-14; }
# seconds_between LATER EARLIER: LATER - EARLIER (two `now` readings) in seconds, e.g. "12.3".
seconds_between() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.1f", a-b}'; }
k() { "$BIN/kubectl" "$@"; }

# --- certificates: one CA for the engine (API server front proxy, the operator's and adapter's
# gRPC, the adapter's serving), one for wool-scaler's TLS
certs() {
    local d="$TMP/pki" ips="IP:127.0.0.1"
    [[ -n "$AGG_IP" ]] && ips+=",IP:$AGG_IP"
    mkdir -p "$d"
    leaf() { # ca-stem name san
        openssl req -newkey rsa:2048 -nodes -keyout "$d/$2.key" -subj "/CN=$2" -out "$d/$2.csr" 2>/dev/null
        printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth,clientAuth\nbasicConstraints=CA:FALSE\n' "$3" > "$d/$2.ext"
        openssl x509 -req -in "$d/$2.csr" -CA "$d/$1.crt" -CAkey "$d/$1.key" -CAcreateserial -days 2 \
            -extfile "$d/$2.ext" -out "$d/$2.crt" 2>/dev/null
    }
    for ca in engine-ca scaler-ca; do
        openssl req -x509 -newkey rsa:2048 -nodes -keyout "$d/$ca.key" -out "$d/$ca.crt" -days 2 \
            -subj "/CN=$ca" -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign 2>/dev/null
    done
    leaf engine-ca keda "DNS:localhost,DNS:keda-operator.keda.svc,DNS:keda-metrics-apiserver.keda.svc,$ips"
    leaf engine-ca front-proxy "DNS:front-proxy"
    leaf scaler-ca wool-scaler "DNS:localhost,DNS:wool-scaler.default.svc,IP:127.0.0.1"
    leaf scaler-ca keda-to-scaler "DNS:keda-operator"
    mkdir -p "$TMP/keda-certs"
    cp "$d/engine-ca.crt" "$TMP/keda-certs/ca.crt"
    cp "$d/keda.crt" "$TMP/keda-certs/tls.crt"
    cp "$d/keda.key" "$TMP/keda-certs/tls.key"
    openssl genrsa -out "$d/sa.key" 2048 2>/dev/null
    openssl rsa -in "$d/sa.key" -pubout -out "$d/sa.pub" 2>/dev/null
}

control_plane() {
    local etcd_port peer_port
    etcd_port=$(free_port); peer_port=$(free_port)
    start etcd "$BIN/etcd" --name e2e --data-dir "$TMP/etcd" \
        --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
        --listen-peer-urls "http://127.0.0.1:$peer_port" --initial-advertise-peer-urls "http://127.0.0.1:$peer_port" \
        --initial-cluster "e2e=http://127.0.0.1:$peer_port" --listen-metrics-urls "http://127.0.0.1:$(free_port)"
    TOKEN="$(openssl rand -hex 16)"
    echo "$TOKEN,admin,admin,system:masters" > "$TMP/tokens.csv"
    API_PORT=$(free_port)
    local agg=()
    agg=(--requestheader-client-ca-file="$TMP/pki/engine-ca.crt" --requestheader-allowed-names=front-proxy
         --requestheader-username-headers=X-Remote-User --requestheader-group-headers=X-Remote-Group
         --requestheader-extra-headers-prefix=X-Remote-Extra- --proxy-client-cert-file="$TMP/pki/front-proxy.crt"
         --proxy-client-key-file="$TMP/pki/front-proxy.key" --enable-aggregator-routing=true)
    start kube-apiserver "$BIN/kube-apiserver" --etcd-servers="http://127.0.0.1:$etcd_port" \
        --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$API_PORT" \
        --cert-dir="$TMP/apiserver-certs" --token-auth-file="$TMP/tokens.csv" --authorization-mode=RBAC \
        --service-account-key-file="$TMP/pki/sa.pub" --service-account-signing-key-file="$TMP/pki/sa.key" \
        --service-account-issuer=https://kubernetes.default.svc --service-cluster-ip-range=10.96.0.0/24 \
        "${agg[@]}"
    cat > "$KUBECONFIG" <<EOF
apiVersion: v1
kind: Config
clusters: [{name: e2e, cluster: {server: "https://127.0.0.1:$API_PORT", insecure-skip-tls-verify: true}}]
users: [{name: admin, user: {token: "$TOKEN"}}]
contexts: [{name: e2e, context: {cluster: e2e, user: admin}}]
current-context: e2e
EOF
    wait_for 60 "the API server's /readyz" k get --raw /readyz
    say "API server ready on 127.0.0.1:$API_PORT"
    k create namespace keda >/dev/null
    k apply --server-side -f "$WOOL_E2E_ENGINE/crds/" >/dev/null
    wait_for 60 "KEDA's CRDs" k get scaledobjects -A
}

keda_operator() {
    start keda-operator env POD_NAMESPACE=keda KEDA_CLUSTER_OBJECT_NAMESPACE=keda OPERATOR_NAME=keda-operator \
        WATCH_NAMESPACE="" "$BIN/keda-operator" --kubeconfig "$KUBECONFIG" --cert-dir "$TMP/keda-certs" \
        --metrics-bind-address "127.0.0.1:$(free_port)" --health-probe-bind-address "127.0.0.1:$(free_port)" \
        --metrics-service-bind-address "127.0.0.1:$KEDA_GRPC_PORT" --enable-webhook-patching=false \
        --enable-apiservice-patching=false --zap-log-level=info
    wait_for 90 "KEDA's operator" grep -q 'Starting workers' "$TMP/logs/keda-operator.log" "$TMP/logs/keda-operator.out"
    say "KEDA operator running (metrics service 127.0.0.1:$KEDA_GRPC_PORT)"
}

# The HPA half: KEDA's metrics adapter as the external.metrics.k8s.io APIService (on the veth
# address: Endpoints may not be loopback) and kube-controller-manager's HPA controller; with the
# scaledown case, its Deployment and ReplicaSet controllers as well (they make and delete pods;
# no kubelet runs, so the case plays its part for the pods' status).
hpa_parts() {
    local port
    port=$(free_port)
    start keda-adapter env POD_NAMESPACE=keda KEDA_CLUSTER_OBJECT_NAMESPACE=keda WATCH_NAMESPACE="" \
        "$BIN/keda-adapter" --kubeconfig "$KUBECONFIG" --lister-kubeconfig "$KUBECONFIG" \
        --authentication-kubeconfig "$KUBECONFIG" --authorization-kubeconfig "$KUBECONFIG" \
        --secure-port "$port" --bind-address "$AGG_IP" --cert-dir "$TMP/keda-certs" \
        --tls-cert-file "$TMP/keda-certs/tls.crt" --tls-private-key-file "$TMP/keda-certs/tls.key" \
        --metrics-service-address "127.0.0.1:$KEDA_GRPC_PORT" --port "$(free_port)" --profiling-bind-address "" \
        --metrics-service-grpc-authority localhost
    k apply --server-side -f - >/dev/null <<EOF
apiVersion: v1
kind: Service
metadata: {name: keda-metrics-apiserver, namespace: keda}
spec: {ports: [{name: https, port: 443, targetPort: $port}]}
---
apiVersion: v1
kind: Endpoints
metadata: {name: keda-metrics-apiserver, namespace: keda}
subsets: [{addresses: [{ip: "$AGG_IP"}], ports: [{name: https, port: $port}]}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: keda-metrics-apiserver-1, namespace: keda, labels: {kubernetes.io/service-name: keda-metrics-apiserver}}
addressType: IPv4
endpoints: [{addresses: ["$AGG_IP"], conditions: {ready: true}}]
ports: [{name: https, port: $port}]
---
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {name: v1beta1.external.metrics.k8s.io}
spec:
  service: {name: keda-metrics-apiserver, namespace: keda, port: 443}
  group: external.metrics.k8s.io
  version: v1beta1
  caBundle: $(base64 -w0 "$TMP/pki/engine-ca.crt")
  groupPriorityMinimum: 100
  versionPriority: 100
EOF
    if ! wait_for 90 "the external-metrics APIService Available" \
        sh -c "'$BIN/kubectl' get apiservice v1beta1.external.metrics.k8s.io -o jsonpath='{.status.conditions[?(@.type==\"Available\")].status}' | grep -qx True"; then
        k get apiservice v1beta1.external.metrics.k8s.io -o jsonpath='{.status.conditions}' >&2; echo >&2
        return 1
    fi
    say "KEDA metrics adapter on $AGG_IP:$port, APIService v1beta1.external.metrics.k8s.io Available"
    start kube-controller-manager "$BIN/kube-controller-manager" --kubeconfig "$KUBECONFIG" \
        --authentication-kubeconfig "$KUBECONFIG" --authorization-kubeconfig "$KUBECONFIG" \
        --bind-address 127.0.0.1 --secure-port "$(free_port)" --leader-elect=false \
        --controllers "$KCM_CONTROLLERS" --horizontal-pod-autoscaler-sync-period 2s \
        --cert-dir "$TMP/kcm-certs"
    wait_for 60 "kube-controller-manager" grep -q 'Starting HPA controller' "$TMP/logs/kube-controller-manager.log" "$TMP/logs/kube-controller-manager.out"
}

# --- fleets
WORKERS=()
workers() { # n: starts n more wool-workers, appends their addresses to WORKERS
    local i n=$1
    for ((i = 0; i < n; i++)); do
        local name="worker-${#WORKERS[@]}"
        start "$name" "$WORKER" --listen 127.0.0.1:0
        WORKERS+=("$(first_line "$TMP/logs/$name.out")")
    done
}
scaler() { # name extra-args...: a wool-scaler on a free port; sets SCALER_ADDR_<name>, SCALER_METRICS_<name>
    local name=$1; shift
    local port mport
    port=$(free_port); mport=$(free_port)
    start "scaler-$name" "$SCALER_BIN" --listen "127.0.0.1:$port" --metrics-listen "127.0.0.1:$mport" --log-level info "$@"
    wait_for 20 "wool-scaler $name" curl -sf "http://127.0.0.1:$mport/metrics"
    eval "SCALER_ADDR_$name=127.0.0.1:$port SCALER_METRICS_$name=127.0.0.1:$mport"
}

# --- the chart, rendered: `helm template` with the images named by the digests images.sh printed
render() { # release namespace helm-args...
    local release=$1 ns=$2; shift 2
    "$HELM" template "$release" "$ROOT/charts/wool-scaler" --namespace "$ns" \
        --set "image.digest=$SCALER_DIGEST" --set "workers.image.digest=$WORKER_DIGEST" "$@"
}
# One case's objects: the workers' Deployment NAME (replicas 0: KEDA scales from there), its
# headless Service and the ScaledObject NAME (with the TriggerAuthentication when the values ask
# for TLS), from the chart with tests/helm/e2e-values.yaml, the suite's timings and the case's
# values (later --set wins).
apply_case() { # ns name helm-args...
    local ns=$1 name=$2; shift 2
    k get namespace "$ns" >/dev/null 2>&1 || k create namespace "$ns" >/dev/null
    render "$name" "$ns" -f "$ROOT/tests/helm/e2e-values.yaml" --set "workers.name=$name" \
        --set "scaledObject.pollingInterval=$POLL" --set "scaledObject.cooldownPeriod=$COOL" \
        --set "scaledObject.idleThreshold=${IDLE}s" --set scaledObject.maxSweepAge=1s \
        --show-only templates/workers.yaml --show-only templates/scaledobject.yaml "$@" > "$TMP/case-$name.yaml"
    k apply --server-side -n "$ns" -f "$TMP/case-$name.yaml" >/dev/null
}
targets() { # addresses...: a --set-json of the fleet's targets
    local list
    list="$(printf '"%s",' "$@")"
    echo "scaledObject.fleet.targets=[${list%,}]"
}
replicas() { k get deployment "$2" -n "$1" -o jsonpath='{.spec.replicas}'; }
ready_status() { k get scaledobject "$2" -n "$1" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}'; }

# The timeline: every second, spec.replicas and what the scaler last answered for this
# ScaledObject (wool_scaler_active, wool_scaler_busy_workers) with its call counters.
sampler_start() { # ns name metrics-addr
    local ns=$1 name=$2 maddr=$3 file="$TMP/timeline-$2"
    : > "$file"
    (
        set +e +o pipefail
        while :; do
            r="$(replicas "$ns" "$name" 2>/dev/null || echo '?')"
            m="$(curl -sf "http://$maddr/metrics" 2>/dev/null || true)"
            active="$(grep "^wool_scaler_active{scaledobject=\"$ns/$name\"" <<<"$m" | awk '{print $NF}' | head -1)"
            busy="$(grep "^wool_scaler_busy_workers{scaledobject=\"$ns/$name\"" <<<"$m" | awk '{print $NF}' | head -1)"
            calls="$(grep '^wool_scaler_calls_total{' <<<"$m" | sed -E 's/wool_scaler_calls_total\{rpc="([A-Za-z]+)",answer="([a-z]+)"\} /\1.\2=/' | tr '\n' ' ')"
            echo "$(now) replicas=${r:-?} active=${active:--} metric=${busy:--} ${calls}"
            sleep 1
        done
    ) >> "$file" 2>/dev/null &
    SAMPLER=$!
}
sampler_stop() { kill "$SAMPLER" 2>/dev/null || true; wait "$SAMPLER" 2>/dev/null || true; }
mark() { echo "$(now) --- $*" >> "$TMP/timeline-$1"; }
print_timeline() { # name t0
    local t0=$2
    echo "    timeline of $1 (s from the case's start; replicas = Deployment spec.replicas; active/metric = wool-scaler's last IsActive and metric for it):"
    awk -v t0="$t0" '{ t = $1 - t0; $1 = ""; printf "    %7.1f %s\n", t, $0 }' "$TMP/timeline-$1" |
        awk '{ key = $0; sub(/^ *[0-9.-]+ /, "", key); gsub(/[A-Za-z]+\.[a-z]+=[0-9]+/, "", key); if (key != last || /---/) print; last = key }'
}
first_time() { # name awk-condition-on-replicas after-time: first sample time with replicas matching
    awk -v after="$3" "\$1 >= after && \$2 ~ /^replicas=/ { split(\$2, a, \"=\"); r = a[2]; if (r ~ /^[0-9]+\$/ && ($2)) { print \$1; exit } }" "$TMP/timeline-$1"
}
any_between() { # name condition from to: is there a sample in [from, to] whose replicas match
    awk -v from="$3" -v to="$4" "\$1 >= from && \$1 <= to && \$2 ~ /^replicas=/ { split(\$2, a, \"=\"); r = a[2]; if (r ~ /^[0-9]+\$/ && ($2)) { found = 1 } } END { exit !found }" "$TMP/timeline-$1"
}
max_between() {
    awk -v from="$2" -v to="$3" '$1 >= from && $1 <= to && $2 ~ /^replicas=/ { split($2, a, "="); if (a[2] + 0 > m) m = a[2] + 0 } END { print m + 0 }' "$TMP/timeline-$1"
}
check() { # case description condition-command...
    local c=$1 what=$2; shift 2
    if "$@"; then echo "    ok: $what"; else echo "    FAILED: $what"; FAILS+=("$c: $what"); fi
}
fgt() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a > b) }'; }   # float a > b
fle() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a <= b) }'; }
wait_replicas() { # ns name condition limit: waits until replicas match (r is the count)
    local until=$((SECONDS + $4)) r
    while ((SECONDS < until)); do
        r="$(replicas "$1" "$2" 2>/dev/null || echo -1)"
        awk -v r="$r" "BEGIN { exit !($3) }" && return 0
        sleep 0.5
    done
    return 1
}

IDLE=3 POLL=2 COOL=6
# Activation and scale to zero through an `external` trigger polling IsActive: two wool-workers
# listed as targets, a 12-second task on one.
# One cycle of a case: waits for ScaledObject NAME to be Ready, lets it settle for SETTLE
# seconds, dispatches one task of SECONDS on WORKER, waits for the Deployment to return to 0,
# stops the sampler and prints the timeline from T0. Sets T_WORK and T_END (the task's start and
# end), T_UP (first sample above 0 since T0) and T_DOWN (first sample at 0 since the end).
dispatch_cycle() { # ns name worker seconds settle t0
    local ns=$1 name=$2 worker=$3 seconds=$4 settle=$5 t0=$6
    wait_for 30 "the ScaledObject Ready" sh -c "[ \"\$('$BIN/kubectl' get scaledobject $name -n $ns -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].status}')\" = True ]" || true
    sleep "$settle"
    T_WORK=$(now)
    mark "$name" "dispatch: 1 task of $seconds s on $worker"
    "$BURST" "$worker" 1 "$seconds" > "$TMP/logs/burst-$name.log" 2>&1
    T_END=$(now)
    mark "$name" "task ended"
    wait_replicas "$ns" "$name" 'r == 0' $((IDLE + COOL + 10 * POLL + 20)) || true
    sleep 2
    sampler_stop
    T_UP="$(first_time "$name" 'r > 0' "$t0")"
    T_DOWN="$(first_time "$name" 'r == 0' "$T_END")"
    print_timeline "$name" "$t0"
}

case_activation() {
    local ns=e2e name=activation
    echo "== activation and scale to zero (external trigger, targets, idleThreshold ${IDLE}s, pollingInterval $POLL, cooldownPeriod $COOL)"
    workers 2
    sleep $((IDLE + 1))   # a just-started worker counts as busy for idleThreshold
    local t0; t0=$(now)
    sampler_start "$ns" "$name" "$SCALER_METRICS_plain"
    apply_case "$ns" "$name" --set "scaledObject.scalerAddress=$SCALER_ADDR_plain" --set-json "$(targets "${WORKERS[0]}" "${WORKERS[1]}")"
    mark "$name" "ScaledObject applied (workers idle)"
    dispatch_cycle "$ns" "$name" "${WORKERS[0]}" 12 $((3 * POLL + 1)) "$t0"
    local t_work=$T_WORK t_end=$T_END t_up=$T_UP t_down=$T_DOWN
    check activation "ScaledObject Ready" test "$(ready_status "$ns" "$name")" = True
    check activation "replicas leave 0 at all" test -n "$t_up"
    [[ -n "$t_up" ]] && check activation "replicas leave 0 after the dispatch ($(seconds_between "$t_up" "$t_work") s after it)" fgt "$t_up" "$t_work"
    [[ -n "$t_up" ]] && check activation "and while the task is in flight (before its end)" fle "$t_up" "$t_end"
    check activation "scaled back to 0 after the task's end" test -n "$t_down"
    if [[ -n "$t_down" ]]; then
        local d; d=$(seconds_between "$t_down" "$t_end")
        check activation "replicas stay above 0 until task end + idleThreshold (0 at +$d s)" fgt "$d" "$IDLE"
        check activation "0 within idleThreshold + cooldownPeriod + 6 polling intervals + 3 s of the end (+$d s)" \
            fle "$d" $((IDLE + COOL + 6 * POLL + 3))
        RESULTS+=("activation: 0->1 $(seconds_between "$t_up" "$t_work") s after dispatch; 1->0 $d s after the task ended")
    fi
}

# A real Wool 0.15.7 pool of two found by its discovery namespace, running one 12-second task.
case_pool() {
    local ns=e2e name=pool pool_ns="wool-e2e-$$"
    echo "== a real Wool 0.15.7 pool found by namespace (external trigger, namespace: $pool_ns)"
    local t0; t0=$(now)
    sampler_start "$ns" "$name" "$SCALER_METRICS_plain"
    apply_case "$ns" "$name" --set "scaledObject.scalerAddress=$SCALER_ADDR_plain" \
        --set scaledObject.fleet.source=namespace --set "scaledObject.fleet.namespace=$pool_ns"
    mark "$name" "ScaledObject applied (no pool yet: a fleet of none)"
    sleep $((3 * POLL + 2))
    local t_work; t_work=$(now)
    mark "$name" "pool started: 2 workers, 1 task of 12 s dispatched through it"
    start wool-pool "$PY" tests/interop/wool_pool.py pool "$pool_ns" --spawn 2 --busy 12 --busy-count 1
    wait_for 60 "the pool's task to end" grep -q '^busy-done' "$TMP/logs/wool-pool.out" || true
    local t_end; t_end=$(now)
    mark "$name" "pool's task ended ($(grep -c . "$TMP/logs/wool-pool.out") pool lines: $(tr '\n' ' ' < "$TMP/logs/wool-pool.out" | cut -c1-80))"
    wait_replicas "$ns" "$name" 'r == 0' $((IDLE + COOL + 10 * POLL + 20)) || true
    sleep 2
    sampler_stop
    stop wool-pool
    local t_up t_down
    t_up="$(first_time "$name" 'r > 0' "$t0")"
    t_down="$(first_time "$name" 'r == 0' "$t_end")"
    print_timeline "$name" "$t0"
    check pool "the pool's task ran" grep -q '^busy-done' "$TMP/logs/wool-pool.out"
    check pool "replicas stay 0 before the pool exists" test -n "$t_up"
    [[ -n "$t_up" ]] && check pool "replicas leave 0 once the pool works" fgt "$t_up" "$t_work"
    [[ -n "$t_up" ]] && check pool "and before its task ends" fle "$t_up" "$t_end"
    if [[ -n "$t_down" ]]; then
        local d; d=$(seconds_between "$t_down" "$t_end")
        check pool "replicas stay above 0 until task end + idleThreshold (0 at +$d s)" fgt "$d" "$IDLE"
        check pool "0 within idleThreshold + cooldownPeriod + 6 polling intervals + 3 s (+$d s)" fle "$d" $((IDLE + COOL + 6 * POLL + 3))
        RESULTS+=("pool: 0->1 $(seconds_between "$t_up" "$t_work") s after the pool started working; 1->0 $d s after its task ended")
    else
        check pool "scaled back to 0 after the task's end" false
    fi
}

# StreamIsActive: an `external-push` trigger with a 300 s pollingInterval: activation must come
# from the stream, long before the next poll.
case_stream() {
    local ns=e2e name=stream
    echo "== StreamIsActive (external-push, pollingInterval 300)"
    workers 1
    local w="${WORKERS[-1]}"
    sleep $((IDLE + 1))
    local t0; t0=$(now)
    sampler_start "$ns" "$name" "$SCALER_METRICS_plain"
    apply_case "$ns" "$name" --set "scaledObject.scalerAddress=$SCALER_ADDR_plain" --set-json "$(targets "$w")" \
        --set scaledObject.triggerType=external-push --set scaledObject.pollingInterval=300
    mark "$name" "ScaledObject applied"
    wait_for 30 "the ScaledObject Ready" sh -c "[ \"\$('$BIN/kubectl' get scaledobject $name -n $ns -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].status}')\" = True ]" || true
    sleep 6
    local t_work; t_work=$(now)
    mark "$name" "dispatch: 1 task of 15 s"
    "$BURST" "$w" 1 15 > "$TMP/logs/burst-$name.log" 2>&1 &
    local burst=$!
    wait_replicas "$ns" "$name" 'r > 0' 30 || true
    wait "$burst" || true
    local t_end; t_end=$(now)
    mark "$name" "task ended"
    sleep $((IDLE + COOL + 3 * POLL))
    sampler_stop
    local t_up; t_up="$(first_time "$name" 'r > 0' "$t0")"
    print_timeline "$name" "$t0"
    check stream "replicas stay 0 before work" test -n "$t_up"
    if [[ -n "$t_up" ]]; then
        local d; d=$(seconds_between "$t_up" "$t_work")
        check stream "replicas leave 0 after the dispatch" fgt "$t_up" "$t_work"
        check stream "within 20 s of it, long before the next poll (300 s): from the stream (+$d s)" fle "$d" 20
        local r_late; r_late=$(replicas "$ns" "$name")
        check stream "KEDA ignores the stream's inactive answer: still $r_late replica(s) idleThreshold + cooldownPeriod + 6 s after the end (scale to zero waits for a poll)" test "$r_late" -gt 0
        RESULTS+=("stream: 0->1 $d s after dispatch with pollingInterval 300; replicas $(replicas "$ns" "$name") $(awk -v a="$(now)" -v b="$t_end" 'BEGIN{printf "%.0f", a-b}') s after the end (scale-down waits for the next poll)")
    fi
    k delete scaledobject "$name" -n "$ns" --wait=false >/dev/null
}

# TLS from KEDA to wool-scaler: the scaler serves mutual TLS; KEDA takes caCert, tlsClientCert and
# tlsClientKey from Secrets through the TriggerAuthentication the chart renders with scaler.tls.
case_tls() {
    local ns=e2e name=tls
    echo "== TLS from KEDA to the scaler (mutual; the chart's TriggerAuthentication, scaler.tls)"
    k get namespace "$ns" >/dev/null 2>&1 || k create namespace "$ns" >/dev/null
    k create secret generic wool-scaler-serving-tls -n "$ns" --from-file=ca.crt="$TMP/pki/scaler-ca.crt" \
        --from-file=tls.crt="$TMP/pki/wool-scaler.crt" --from-file=tls.key="$TMP/pki/wool-scaler.key" >/dev/null
    k create secret tls keda-to-scaler-tls -n "$ns" --cert="$TMP/pki/keda-to-scaler.crt" --key="$TMP/pki/keda-to-scaler.key" >/dev/null
    workers 1
    local w="${WORKERS[-1]}"
    sleep $((IDLE + 1))
    local t0; t0=$(now)
    sampler_start "$ns" "$name" "$SCALER_METRICS_tls"
    local tls=(--set "scaledObject.scalerAddress=$SCALER_ADDR_tls" --set-json "$(targets "$w")"
               --set scaler.tls.enabled=true --set scaler.tls.secretName=wool-scaler-serving-tls)
    apply_case "$ns" "$name" "${tls[@]}" --set scaler.tls.kedaClientSecretName=keda-to-scaler-tls
    # the same without KEDA's client certificate (its TriggerAuthentication gives caCert only):
    # the scaler serves mutual TLS, so it must refuse KEDA
    apply_case "$ns" "$name-noauth" "${tls[@]}"
    mark "$name" "ScaledObjects applied (with and without KEDA's client certificate)"
    dispatch_cycle "$ns" "$name" "$w" 10 $((2 * POLL)) "$t0"
    local t_work=$T_WORK t_end=$T_END t_up=$T_UP t_down=$T_DOWN
    check tls "ScaledObject Ready over mutual TLS" test "$(ready_status "$ns" "$name")" = True
    [[ -n "$t_up" ]] && check tls "replicas leave 0 during the task" sh -c "awk 'BEGIN{exit !($t_up > $t_work && $t_up <= $t_end)}'" ||
        check tls "replicas leave 0 during the task" false
    check tls "and return to 0 after it" test -n "$t_down"
    check tls "without KEDA's client certificate the ScaledObject is not Ready (the scaler refuses KEDA)" \
        test "$(ready_status "$ns" "$name-noauth")" != True
    check tls "and its Deployment stays at 0" test "$(replicas "$ns" "$name-noauth")" = 0
    RESULTS+=("tls: Ready=$(ready_status "$ns" "$name") with KEDA's client certificate, Ready=$(ready_status "$ns" "$name-noauth") without; 0->1->0 through mutual TLS")
    k delete scaledobject "$name-noauth" -n "$ns" --wait=false >/dev/null
}

# The scaler unreachable: KEDA keeps the replica count (no fallback: Ready False); with a
# fallback, the HPA is given fallback.replicas once failureThreshold is passed.
case_unreachable() {
    local ns=e2e name=unreachable fallback="${1:-}"
    echo "== the scaler unreachable (while its fleet is busy)${fallback:+, with fallback: failureThreshold 2, replicas 3}"
    scaler down
    workers 1
    local w="${WORKERS[-1]}"
    local t0; t0=$(now)
    sampler_start "$ns" "$name" "$SCALER_METRICS_down"
    local fb=()
    [[ -n "$fallback" ]] && fb=(--set-json 'scaledObject.fallback={"failureThreshold":2,"replicas":3}')
    apply_case "$ns" "$name" --set "scaledObject.scalerAddress=$SCALER_ADDR_down" --set-json "$(targets "$w")" \
        --set scaledObject.maxReplicaCount=5 --set scaledObject.metricType=AverageValue \
        --set scaledObject.idleThreshold=30s "${fb[@]}"
    mark "$name" "ScaledObject applied (the worker just started: busy for 30 s)"
    wait_replicas "$ns" "$name" 'r > 0' 30 || true
    local r_before; r_before=$(replicas "$ns" "$name")
    sleep 2
    local t_kill; t_kill=$(now)
    mark "$name" "wool-scaler stopped"
    stop scaler-down
    sleep $(( IDLE + COOL + 6 * POLL ))
    local r_after ready; r_after=$(replicas "$ns" "$name"); ready=$(ready_status "$ns" "$name")
    local fbcond; fbcond=$(k get scaledobject "$name" -n "$ns" -o jsonpath='{.status.conditions[?(@.type=="Fallback")].status}')
    mark "$name" "Ready=$ready Fallback=${fbcond:-none} replicas=$r_after"
    sampler_stop
    print_timeline "$name" "$t0"
    check unreachable "replicas left 0 while the scaler answered (busy)" test "${r_before:-0}" -gt 0
    if [[ -z "$fallback" ]]; then
        check unreachable "with the scaler gone (longer than cooldownPeriod) KEDA keeps the count ($r_before -> $r_after)" test "$r_after" = "$r_before"
        check unreachable "and the ScaledObject is not Ready" test "$ready" != True
    else
        # KEDA v2.21.0 asks the external scaler for GetMetricSpec again after an error; unreachable,
        # it has no metric to give the fallback, so the fallback never engages (docs/kubernetes.md says so).
        check unreachable "with a fallback configured KEDA still keeps the count ($r_before -> $r_after): the fallback does not engage" test "$r_after" = "$r_before"
        check unreachable "and the Fallback condition is not True (${fbcond:-none})" test "$fbcond" != True
    fi
    RESULTS+=("unreachable${fallback:+ (fallback)}: replicas $r_before -> $r_after over $(( IDLE + COOL + 6 * POLL )) s without the scaler; Ready=$ready Fallback=${fbcond:-none}")
    k delete scaledobject "$name" -n "$ns" --wait=false >/dev/null
    k delete deployment "$name" -n "$ns" --wait=false >/dev/null
    sleep 2
}

# The HPA half: 4 workers listed, targetValue 1; three of them busy at once: KEDA activates
# (0 -> 1), the HPA follows the busy-worker metric above 1, and back down; then KEDA to 0.
case_hpa() {
    local ns=e2e name=hpa
    echo "== the HPA half (kube-controller-manager's HPA controller + KEDA's metrics adapter)"
    workers 4
    local n=${#WORKERS[@]}
    local a=${WORKERS[n-4]} b=${WORKERS[n-3]} c=${WORKERS[n-2]} d=${WORKERS[n-1]}
    sleep $((IDLE + 1))
    local t0; t0=$(now)
    sampler_start "$ns" "$name" "$SCALER_METRICS_plain"
    apply_case "$ns" "$name" --set "scaledObject.scalerAddress=$SCALER_ADDR_plain" --set-json "$(targets "$a" "$b" "$c" "$d")" \
        --set scaledObject.maxReplicaCount=4 --set scaledObject.targetValue=1 \
        --set-json 'scaledObject.advanced={"horizontalPodAutoscalerConfig":{"behavior":{"scaleDown":{"stabilizationWindowSeconds":0},"scaleUp":{"stabilizationWindowSeconds":0}}}}'
    mark "$name" "ScaledObject applied (4 workers idle, targetValue 1)"
    sleep $((3 * POLL))
    local t_work; t_work=$(now)
    mark "$name" "dispatch: 3 tasks of 30 s, one on each of 3 workers"
    local bursts=()
    for w in "$a" "$b" "$c"; do "$BURST" "$w" 1 30 >> "$TMP/logs/burst-$name.log" 2>&1 & bursts+=($!); done
    wait "${bursts[@]}" || true
    local t_end; t_end=$(now)
    mark "$name" "tasks ended"
    wait_replicas "$ns" "$name" 'r == 0' $((IDLE + COOL + 15 * POLL + 40)) || true
    sleep 2
    sampler_stop
    local peak t_down
    peak="$(max_between "$name" "$t_work" "$t_end")"
    t_down="$(first_time "$name" 'r == 0' "$t_end")"
    print_timeline "$name" "$t0"
    echo "    the HPA: $(k get hpa "keda-hpa-$name" -n "$ns" -o jsonpath='min {.spec.minReplicas} max {.spec.maxReplicas}, desired now {.status.desiredReplicas}')"
    check hpa "the HPA follows the busy-worker metric above 1 while 3 workers are busy (peak $peak)" test "$peak" -ge 2
    check hpa "and back: 0 after the tasks end" test -n "$t_down"
    RESULTS+=("hpa: peak $peak replicas with 3 busy workers (targetValue 1); back to 0 $( [[ -n "$t_down" ]] && seconds_between "$t_down" "$t_end") s after the end")
}

# The chart as an operator installs it: its default values and every documented combination
# (charts/wool-scaler/ci/*-values.yaml), each rendered by `helm template` into a namespace of its
# own and applied server-side (not a dry run). The ScaledObjects go in paused (the
# scaledObject.annotations value): their scalerAddress is a cluster name, and KEDA would look it
# up in DNS. The NetworkPolicies are accepted by the API server (no CNI here: nothing enforces
# them).
case_manifests() {
    echo "== the chart's manifests (default values and every documented combination), applied server-side"
    local combo ns out ok=0 n=0
    for combo in default "$ROOT"/charts/wool-scaler/ci/*-values.yaml; do
        ns="docs-$n"; n=$((n + 1))
        k create namespace "$ns" >/dev/null
        local args=()
        [[ $combo != default ]] && args=(-f "$combo")
        if ! render wool "$ns" "${args[@]}" --set-json 'scaledObject.annotations={"autoscaling.keda.sh/paused":"true"}' \
            > "$TMP/manifests-$n.yaml" 2> "$TMP/logs/helm-$n.log"; then
            echo "    $(basename "$combo"): helm template failed: $(cat "$TMP/logs/helm-$n.log")"; ok=1; continue
        fi
        if out="$(k apply --server-side -n "$ns" -f "$TMP/manifests-$n.yaml" 2>&1)"; then
            echo "    $(basename "$combo") (namespace $ns): $(tr '\n' ';' <<<"$out")"
        else
            echo "    $(basename "$combo"): REFUSED: $out"; ok=1
        fi
    done
    check manifests "every rendering accepted by kube-apiserver (KEDA's CRDs validating the ScaledObjects)" test $ok = 0
    local image
    image="$(k get deployment -n docs-0 wool-scaler -o jsonpath='{.spec.template.spec.containers[0].image}')"
    check manifests "the scaler's Deployment names the image scripts/images.sh built, by digest ($image)" \
        test "$image" = "ghcr.io/libwool/wool-scaler@$SCALER_DIGEST"
    image="$(k get deployment -n docs-1 wool-workers -o jsonpath='{.spec.template.spec.containers[0].image}')"   # ci/namespace-values.yaml
    check manifests "the workers' Deployment names the image scripts/images.sh built, by digest ($image)" \
        test "$image" = "ghcr.io/libwool/wool-worker@$WORKER_DIGEST"
    check manifests "the default values' NetworkPolicy stored (API server acceptance only: no CNI enforces it)" \
        test "$(k get networkpolicy -n docs-0 -o name | wc -l)" = 1
    local sel; sel="$(k get networkpolicy -n docs-0 wool-scaler -o jsonpath='{.spec.ingress[0].from[0].podSelector.matchLabels.app}')"
    check manifests "the scaler's policy lets only KEDA's operator reach 9090, as rendered (podSelector app=$sel)" test "$sel" = keda-operator
}

# --- pods: the workers as a Deployment's pods, their status played by the test (no kubelet)
# Each pod of Deployment NAME gets, through the status subresource, phase Running, a Ready
# condition and a podIP where a real wool-worker listens (addresses on this network namespace's
# loopback); the pods are matched to IPS in the order given.
pods_of() { # ns name: the Deployment's pods not being deleted, by name
    k get pods -n "$1" -l "app.kubernetes.io/instance=$2" --no-headers \
        -o custom-columns=NAME:.metadata.name,DELETED:.metadata.deletionTimestamp | awk '$2 == "<none>" { print $1 }' | sort
}
play_kubelet() { # ns pod ip
    local now_ts; now_ts="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    k patch pod "$2" -n "$1" --subresource=status --type=merge -p \
        "{\"status\":{\"phase\":\"Running\",\"podIP\":\"$3\",\"podIPs\":[{\"ip\":\"$3\"}],\"conditions\":[{\"type\":\"Ready\",\"status\":\"True\",\"lastTransitionTime\":\"$now_ts\"}]}}" >/dev/null
}
cost_of() { # ns pod: its pod-deletion-cost annotation, or "-"
    local v
    v="$(k get pod "$2" -n "$1" -o jsonpath='{.metadata.annotations.controller\.kubernetes\.io/pod-deletion-cost}' 2>/dev/null || true)"
    echo "${v:--}"
}
pod_ip() { k get pod "$2" -n "$1" -o jsonpath='{.status.podIP}'; }
SD_WORKERS=()   # ip of each worker the scaledown case started
SD_PORT=50051
pod_workers() { # n: n wool-workers, each at its own address on lo, port SD_PORT
    local i base="10.251.$(( $$ % 250 ))"
    for ((i = 0; i < $1; i++)); do
        local ip="$base.$(( 10 + ${#SD_WORKERS[@]} ))"
        ip addr add "$ip/32" dev lo
        start "podworker-${#SD_WORKERS[@]}" "$WORKER" --listen "$ip:$SD_PORT"
        first_line "$TMP/logs/podworker-${#SD_WORKERS[@]}.out" >/dev/null
        SD_WORKERS+=("$ip")
    done
}
# One run: the Deployment at 3 pods, each given a worker (the busy one a pod just made, never
# the one the last run kept), one long task on BUSY, then the ScaledObject (podSelector, deletionCost as asked) and
# KEDA + the HPA take it to 1. Prints the run's timeline; sets RUN_KEPT (the pod left), RUN_BUSY
# (the busy worker's pod), RUN_DELETED and RUN_MARKED (space-separated pod names).
scaledown_run() { # ns name run deletion-cost(true|false) busy-ip [unmark-ip]
    local ns=$1 name=$2 run=$3 cost=$4 busy=$5 unmark=${6:-} t0 pods=() ips=() i p burst2=""
    t0=$(now)
    k delete scaledobject "$name" -n "$ns" --ignore-not-found --wait=true >/dev/null
    k delete hpa "keda-hpa-$name" -n "$ns" --ignore-not-found >/dev/null
    k scale deployment "$name" -n "$ns" --replicas 3 >/dev/null
    wait_for 30 "3 pods of $name" sh -c "[ \$('$BIN/kubectl' get pods -n $ns -l app.kubernetes.io/instance=$name -o name | wc -l) -ge 3 ]"
    mapfile -t pods < <(pods_of "$ns" "$name")
    # The busy worker goes to one of the pods just made (never the pod kept by the last run):
    # Kubernetes' own ranking deletes the newest first, so only the marks can keep it.
    local fresh=() others
    for p in "${pods[@]}"; do if [[ " ${RUN_KEPT:-} " != *" $p "* ]]; then fresh+=("$p"); fi; done
    local busy_pod=${fresh[RANDOM % ${#fresh[@]}]}
    mapfile -t others < <(printf '%s\n' "${SD_WORKERS[@]}" | grep -vxF "$busy" | shuf)
    for ((i = 0; i < 3; i++)); do
        if [[ ${pods[i]} == "$busy_pod" ]]; then ips+=("$busy"); else ips+=("${others[0]}"); others=("${others[@]:1}"); fi
    done
    local line="run $run (deletionCost $cost):"
    RUN_BUSY=""
    for ((i = 0; i < 3; i++)); do
        play_kubelet "$ns" "${pods[i]}" "${ips[i]}"
        line+=" ${pods[i]}=${ips[i]}"
        if [[ ${ips[i]} == "$busy" ]]; then RUN_BUSY=${pods[i]}; line+="(busy)"; fi
    done
    echo "    $line"
    # The unmark run holds the HPA at 3 (minReplicaCount 3) until the unmark is seen, and its
    # tasks last twice as long: the HPA controller may keep an earlier run's recommendations
    # for the same HPA name and scale down within a second of the ScaledObject (seen: +0.9 s),
    # before a task could be dispatched on the marked pod.
    local task=$SD_TASK min=1
    if [[ -n $unmark ]]; then task=$((2 * SD_TASK)); min=3; fi
    "$BURST" "$busy:$SD_PORT" 1 "$task" > "$TMP/logs/burst-$name-$run.log" 2>&1 &
    local burst=$!
    sleep 1
    render "$name" "$ns" -f "$ROOT/tests/helm/e2e-values.yaml" --set "workers.name=$name" \
        --set rbac.pods=true --set rbac.deletionCost=true --set scaledObject.fleet.source=pods \
        --set "scaledObject.fleet.podSelector=app.kubernetes.io/instance=$name" --set "scaledObject.fleet.port=$SD_PORT" \
        --set "scaledObject.deletionCost=$cost" --set "scaledObject.scalerAddress=$SCALER_ADDR_plain" \
        --set "scaledObject.minReplicaCount=$min" --set scaledObject.maxReplicaCount=3 --set "scaledObject.pollingInterval=$POLL" \
        --set "scaledObject.idleThreshold=${IDLE}s" --set scaledObject.maxSweepAge=1s \
        --set-json "scaledObject.advanced={\"horizontalPodAutoscalerConfig\":{\"behavior\":{\"scaleDown\":{\"stabilizationWindowSeconds\":$SD_WINDOW}}}}" \
        --show-only templates/scaledobject.yaml > "$TMP/so-$name.yaml"
    k apply --server-side -n "$ns" -f "$TMP/so-$name.yaml" >/dev/null
    local t_so; t_so=$(now)
    RUN_MARKED=""
    local seen_marked=""
    if [[ -n $unmark ]]; then
        # Wait for the marks, then make a marked pod busy: it must be unmarked.
        local upod=""
        for p in "${pods[@]}"; do if [[ "$(pod_ip "$ns" "$p")" == "$unmark" ]]; then upod=$p; fi; done
        wait_for 20 "$upod marked" sh -c "[ \"\$('$BIN/kubectl' get pod $upod -n $ns -o jsonpath='{.metadata.annotations.controller\\.kubernetes\\.io/pod-deletion-cost}')\" = -2147483648 ]" || true
        seen_marked="$(cost_of "$ns" "$upod")"
        echo "    +$(seconds_between "$(now)" "$t_so") s: $upod marked ($seen_marked); a task dispatched on its worker"
        "$BURST" "$unmark:$SD_PORT" 1 "$task" > "$TMP/logs/burst-$name-$run-unmark.log" 2>&1 &
        local burst2=$!
        wait_for 20 "$upod unmarked" sh -c "[ -z \"\$('$BIN/kubectl' get pod $upod -n $ns -o jsonpath='{.metadata.annotations.controller\\.kubernetes\\.io/pod-deletion-cost}')\" ]" || true
        UNMARK_BEFORE=$seen_marked UNMARK_AFTER="$(cost_of "$ns" "$upod")" UNMARK_POD=$upod
        echo "    +$(seconds_between "$(now)" "$t_so") s: $upod's annotation now: $UNMARK_AFTER; minReplicaCount 3 -> 1"
        k patch scaledobject "$name" -n "$ns" --type=merge -p '{"spec":{"minReplicaCount":1}}' >/dev/null
    fi
    # Sample the marks until the scale-down is done (the HPA's window, then the ReplicaSet).
    local want=1
    if [[ -n $unmark ]]; then want=2; fi
    local until=$((SECONDS + SD_WINDOW + 40)) r
    while ((SECONDS < until)); do
        for p in "${pods[@]}"; do
            if [[ "$(cost_of "$ns" "$p" 2>/dev/null)" == -2147483648 && " $RUN_MARKED " != *" $p "* ]]; then RUN_MARKED+="$p "; fi
        done
        r="$(replicas "$ns" "$name")"
        [[ $r == "$want" && "$(pods_of "$ns" "$name" | wc -l)" == "$want" ]] && break
        sleep 0.5
    done
    local t_done; t_done=$(now)
    local left; left="$(pods_of "$ns" "$name" | tr '\n' ' ')"
    RUN_KEPT=$left
    RUN_DELETED=""
    for p in "${pods[@]}"; do if [[ " $left " != *" $p "* ]]; then RUN_DELETED+="$p "; fi; done
    echo "    +$(seconds_between "$t_done" "$t_so") s after the ScaledObject: replicas $(replicas "$ns" "$name"); marked: ${RUN_MARKED:-none}; deleted: ${RUN_DELETED:-none}; kept: $left(busy pod $RUN_BUSY $([[ " $left " == *" $RUN_BUSY "* ]] && echo kept || echo DELETED))"
    wait "$burst" || true
    if [[ -n ${burst2:-} ]]; then wait "$burst2" || true; fi
}

# Scale-down that keeps the busy worker: pods as the fleet (podSelector), deletionCost on. A
# Deployment of 3 pods, one worker busy with a long task, two idle; KEDA and the HPA take it to 1.
# The pods deleted must be the idle workers' and the busy one kept, in each of SCALEDOWN_RUNS
# runs; the same with the option off reports what Kubernetes' own ranking chose. Then a marked
# pod that turns busy is unmarked, and the busy worker, sent SIGTERM, drains its task.
case_scaledown() {
    local ns=e2e-pods name=scaledown runs=${SCALEDOWN_RUNS:-5} run ok=0 off_kept=0
    echo "== scale-down keeps the busy worker (podSelector + deletionCost; $runs runs, then $runs with the option off)"
    k get namespace "$ns" >/dev/null 2>&1 || k create namespace "$ns" >/dev/null
    k create serviceaccount default -n "$ns" >/dev/null 2>&1 || true
    render "$name" "$ns" -f "$ROOT/tests/helm/e2e-values.yaml" --set "workers.name=$name" --set workers.replicas=0 \
        --set rbac.pods=true --set scaledObject.fleet.source=pods --set scaledObject.fleet.podSelector=x=y \
        --show-only templates/workers.yaml > "$TMP/workers-$name.yaml"
    k apply --server-side -n "$ns" -f "$TMP/workers-$name.yaml" >/dev/null
    pod_workers 3
    local busy=${SD_WORKERS[0]}
    sleep $((IDLE + 1))
    for ((run = 1; run <= runs; run++)); do
        scaledown_run "$ns" "$name" "$run" true "$busy"
        if [[ $(wc -w <<<"$RUN_KEPT") == 1 && " $RUN_KEPT " == *" $RUN_BUSY "* && $(wc -w <<<"$RUN_DELETED") == 2 ]]; then
            ok=$((ok + 1))
        fi
        RESULTS+=("scaledown run $run (deletionCost on): marked ${RUN_MARKED:-none}; deleted ${RUN_DELETED:-none}; busy pod $RUN_BUSY $([[ " $RUN_KEPT " == *" $RUN_BUSY "* ]] && echo kept || echo DELETED)")
    done
    check scaledown "the idle workers' pods deleted and the busy worker's pod kept, $ok of $runs runs" test "$ok" = "$runs"
    for ((run = 1; run <= runs; run++)); do
        scaledown_run "$ns" "$name" "off-$run" false "$busy"
        if [[ " $RUN_KEPT " == *" $RUN_BUSY "* ]]; then off_kept=$((off_kept + 1)); fi
        RESULTS+=("scaledown run off-$run (deletionCost off): Kubernetes deleted ${RUN_DELETED:-none}; busy pod $RUN_BUSY $([[ " $RUN_KEPT " == *" $RUN_BUSY "* ]] && echo kept || echo deleted)")
    done
    echo "    with the option off, Kubernetes' ranking kept the busy pod in $off_kept of $runs runs (reported, not asserted)"
    RESULTS+=("scaledown: option off kept the busy pod in $off_kept of $runs runs")
    # A marked pod that turns busy is unmarked before the scale-down (it then stays: 2 busy).
    scaledown_run "$ns" "$name" unmark true "$busy" "${SD_WORKERS[1]}"
    check scaledown "a marked pod that turns busy is unmarked (annotation $UNMARK_BEFORE, then $UNMARK_AFTER)" \
        test "$UNMARK_BEFORE" = -2147483648 -a "$UNMARK_AFTER" = -
    check scaledown "and kept at the scale-down (kept: $RUN_KEPT)" test -n "$(grep -w -- "$UNMARK_POD" <<<"$RUN_KEPT")"
    # The race marking cannot close is closed by the drain: SIGTERM to the busy worker while its
    # task runs; the task finishes, then the worker exits.
    "$BURST" "$busy:$SD_PORT" 1 6 > "$TMP/logs/burst-$name-drain.log" 2>&1 &
    local burst=$! rc=0
    sleep 2
    kill -TERM "$PID_podworker_0" 2>/dev/null || true
    wait "$burst" || rc=$?
    check scaledown "the busy worker sent SIGTERM drains: its task completes (burst rc $rc: $(tail -1 "$TMP/logs/burst-$name-drain.log"))" test "$rc" = 0
    wait_for 20 "the drained worker to exit" sh -c "! kill -0 $PID_podworker_0 2>/dev/null" || true
    check scaledown "and then it exits" sh -c "! kill -0 $PID_podworker_0 2>/dev/null"
    k delete scaledobject "$name" -n "$ns" --ignore-not-found >/dev/null
    grep -h "pod deletion cost written" "$TMP/logs/scaler-plain.log" "$TMP/logs/scaler-plain.out" 2>/dev/null | wc -l |
        xargs -I{} echo "    the scaler wrote {} deletion-cost patches in this case"
}
# The pod source's bounds, each past its limit on one scaler while another fleet of the same
# scaler keeps serving, each error naming its cause in the scaler's answer (its log shows it):
# - a watch that fails (the scaler's ServiceAccount has no Role yet: forbidden) and is started
#   again with a backoff, serving once the chart's Role (templates/rbac.yaml) is bound;
# - a selector picking more pods than --max-pods-per-fleet (2 here);
# - an API server that is gone (a second scaler whose kubeconfig names a port nothing listens on).
so_of() { # ns name scaler-addr helm-args...: a ScaledObject scaling a Deployment of its own (replicas 0)
    local ns=$1 name=$2 addr=$3; shift 3
    k create deployment "$name" -n "$ns" --image=none --replicas=0 >/dev/null
    render "$name" "$ns" -f "$ROOT/tests/helm/e2e-values.yaml" --set "workers.name=$name" --set rbac.pods=true \
        --set "scaledObject.scalerAddress=$addr" --set "scaledObject.pollingInterval=$POLL" \
        --set "scaledObject.scaleTargetName=$name" "$@" --show-only templates/scaledobject.yaml > "$TMP/so-$name.yaml"
    k apply --server-side -n "$ns" -f "$TMP/so-$name.yaml" >/dev/null
}
served() { # metrics-addr ns/name: whether the scaler recorded an answer for that ScaledObject
    curl -sf "http://$1/metrics" | grep -q "^wool_scaler_busy_workers{scaledobject=\"$2\""
}
case_podbounds() {
    local ns=e2e-bounds sa=bounds-scaler
    echo "== pod source bounds (a failing watch restarted, too many pods, the API server gone)"
    k create namespace "$ns" >/dev/null
    k create serviceaccount default -n "$ns" >/dev/null   # no serviceaccount controller runs
    k create serviceaccount "$sa" -n "$ns" >/dev/null
    local token gone_port
    token="$(k create token "$sa" -n "$ns" --duration 1h)"
    printf '%s\n' "apiVersion: v1" "kind: Config" \
        "clusters: [{name: e2e, cluster: {server: \"https://127.0.0.1:$API_PORT\", insecure-skip-tls-verify: true}}]" \
        "users: [{name: sa, user: {token: \"$token\"}}]" \
        "contexts: [{name: e2e, context: {cluster: e2e, user: sa, namespace: $ns}}]" \
        "current-context: e2e" > "$TMP/bounds.kubeconfig"
    gone_port=$(free_port)
    sed "s#https://127.0.0.1:$API_PORT#https://127.0.0.1:$gone_port#" "$TMP/bounds.kubeconfig" > "$TMP/gone.kubeconfig"
    local b_port b_mport g_port g_mport
    b_port=$(free_port); b_mport=$(free_port); g_port=$(free_port); g_mport=$(free_port)
    start scaler-bounds env KUBECONFIG="$TMP/bounds.kubeconfig" "$SCALER_BIN" --listen "127.0.0.1:$b_port" \
        --metrics-listen "127.0.0.1:$b_mport" --max-pods-per-fleet 2 --log-level info
    start scaler-gone env KUBECONFIG="$TMP/gone.kubeconfig" "$SCALER_BIN" --listen "127.0.0.1:$g_port" \
        --metrics-listen "127.0.0.1:$g_mport" --log-level info
    wait_for 20 "the bounds scalers" sh -c "curl -sf http://127.0.0.1:$b_mport/metrics && curl -sf http://127.0.0.1:$g_mport/metrics"
    # Pods without a Deployment (their status played here): 2 for a small fleet, 3 for a big one.
    local p i=0
    for p in small-0 small-1 big-0 big-1 big-2; do
        k run "$p" -n "$ns" --image=none --restart=Never --labels "fleet=${p%-*}" >/dev/null
        play_kubelet "$ns" "$p" "${SD_WORKERS[1 + i % 2]}"
        i=$((i + 1))
    done
    so_of "$ns" targets-b "127.0.0.1:$b_port" --set-json "$(targets "${SD_WORKERS[1]}:$SD_PORT")"
    so_of "$ns" small "127.0.0.1:$b_port" --set scaledObject.fleet.source=pods --set scaledObject.fleet.podSelector=fleet=small
    so_of "$ns" targets-g "127.0.0.1:$g_port" --set-json "$(targets "${SD_WORKERS[2]}:$SD_PORT")"
    so_of "$ns" gone "127.0.0.1:$g_port" --set scaledObject.fleet.source=pods --set scaledObject.fleet.podSelector=fleet=small
    local blog="$TMP/logs/scaler-bounds.log" glog="$TMP/logs/scaler-gone.log"
    wait_for 40 "a forbidden watch reported" grep -q 'forbidden' "$blog" || true
    check podbounds "a watch that fails names its cause ($(grep -o 'fails (restarted[^"]*' "$blog" | head -1 | cut -c1-160))" \
        grep -q 'watching the pods of selector .*fleet=small.* fails.*forbidden' "$blog"
    # The chart's Role, bound: the failed watch is started again (after its backoff) and serves.
    render wool "$ns" --set rbac.pods=true --set "serviceAccount.name=$sa" --show-only templates/rbac.yaml > "$TMP/rbac-bounds.yaml"
    k apply --server-side -n "$ns" -f "$TMP/rbac-bounds.yaml" >/dev/null
    local t_bound; t_bound=$(now)
    wait_for 60 "the small pod fleet served" served "127.0.0.1:$b_mport" "$ns/small" || true
    check podbounds "once the chart's Role is bound, the restarted watch serves (after $(seconds_between "$(now)" "$t_bound") s)" \
        served "127.0.0.1:$b_mport" "$ns/small"
    so_of "$ns" big "127.0.0.1:$b_port" --set scaledObject.fleet.source=pods --set scaledObject.fleet.podSelector=fleet=big
    wait_for 30 "the big fleet refused" grep -q 'max-pods-per-fleet' "$blog" || true
    check podbounds "too many pods names the bound ($(grep -o 'picks at least [0-9]* pods, more than --max-pods-per-fleet ([0-9]*)' "$blog" | head -1))" \
        grep -q 'picks at least 3 pods, more than --max-pods-per-fleet (2)' "$blog"
    wait_for 30 "the gone API server reported" grep -q 'fleet=small.* fails' "$glog" || true
    check podbounds "an API server that is gone names the cause ($(grep -o 'fails (restarted[^"]*' "$glog" | head -1 | cut -c1-160))" \
        grep -q 'watching the pods of selector .*fleet=small.* fails' "$glog"
    check podbounds "meanwhile the same scalers' other fleets are served (targets-b, targets-g)" \
        sh -c "curl -sf http://127.0.0.1:$b_mport/metrics | grep -q 'scaledobject=\"$ns/targets-b\"' && curl -sf http://127.0.0.1:$g_mport/metrics | grep -q 'scaledobject=\"$ns/targets-g\"'"
    check podbounds "and no answer for the fleets past a bound (big, gone)" \
        sh -c "! curl -sf http://127.0.0.1:$b_mport/metrics | grep -q 'scaledobject=\"$ns/big\"' && ! curl -sf http://127.0.0.1:$g_mport/metrics | grep -q 'scaledobject=\"$ns/gone\"'"
    k delete namespace "$ns" --wait=false >/dev/null
    RESULTS+=("podbounds: a forbidden watch restarted and served once the chart's Role was bound; 3 pods past --max-pods-per-fleet 2 refused; an API server gone refused; the other fleets served")
}
# A measurement, not a test (not in the default case list): E2E_CASES=churn CHURN_MINUTES=10.
# 50 pods (their status played here, each a real wool-worker), deletionCost on, a steady mix of
# busy and idle (a task of CHURN_TASK_MIN to CHURN_TASK_MAX s, default 5 to 24, dispatched to a
# random worker every CHURN_EVERY s, default 1) for CHURN_MINUTES; reports the scaler's
# deletion-cost patches per minute by outcome.
case_churn() {
    local ns=e2e-churn name=churn minutes=${CHURN_MINUTES:-10} n=50 i
    local every=${CHURN_EVERY:-1} task_min=${CHURN_TASK_MIN:-5} task_max=${CHURN_TASK_MAX:-24}
    echo "== churn: $n pods, deletionCost on, a task of $task_min-$task_max s on a random worker every $every s, for $minutes min"
    k create namespace "$ns" >/dev/null
    k create serviceaccount default -n "$ns" >/dev/null
    local first=${#SD_WORKERS[@]}
    pod_workers $n
    local ips=("${SD_WORKERS[@]:first}")
    for ((i = 0; i < n; i++)); do
        k run "churn-$i" -n "$ns" --image=none --restart=Never --labels fleet=churn >/dev/null
        play_kubelet "$ns" "churn-$i" "${ips[i]}"
    done
    sleep $((IDLE + 1))
    so_of "$ns" "$name" "$SCALER_ADDR_plain" --set scaledObject.fleet.source=pods --set scaledObject.fleet.podSelector=fleet=churn \
        --set scaledObject.deletionCost=true --set rbac.deletionCost=true --set "scaledObject.idleThreshold=${IDLE}s" \
        --set scaledObject.maxSweepAge=1s --set scaledObject.minReplicaCount=1 --set scaledObject.maxReplicaCount=1
    patches() { # outcome: the scaler's deletion-cost patches of that outcome so far
        curl -sf "http://$SCALER_METRICS_plain/metrics" |
            awk -v o="outcome=\"$1\"" '/^wool_scaler_deletion_cost_patches_total/ && index($0, o) { s += $NF } END { print s + 0 }'
    }
    local end=$((SECONDS + minutes * 60)) started=$SECONDS
    while ((SECONDS < end)); do
        "$BURST" "${ips[RANDOM % n]}:$SD_PORT" 1 $((task_min + RANDOM % (task_max - task_min + 1))) >/dev/null 2>&1 &
        sleep "$every"
    done
    sleep "$task_max"   # the last tasks end
    local took=$((SECONDS - started)) made refused errors
    made="$(patches made)"; refused="$(patches refused)"; errors="$(patches error)"
    local rate; rate=$(awk -v m="$made" -v t="$took" 'BEGIN{printf "%.1f", m * 60 / t}')
    echo "    $n pods for $took s: $made patches made ($rate/min), $refused refused by the bound, $errors errors"
    RESULTS+=("churn: $n pods, $took s: $rate patches/min ($made made, $refused refused, $errors errors)")
    k delete namespace "$ns" --wait=false >/dev/null
}
SD_TASK=${SD_TASK:-15}
SD_WINDOW=${SD_WINDOW:-8}

# ----------------------------------------------------------------------------- run
CASES="${E2E_CASES:-activation pool stream tls unreachable hpa scaledown podbounds manifests}"
KCM_CONTROLLERS=horizontal-pod-autoscaler-controller
[[ " $CASES " =~ " scaledown " ]] && KCM_CONTROLLERS+=,deployment-controller,replicaset-controller
say "temp dir $TMP"
certs
control_plane
KEDA_GRPC_PORT=$(free_port)
keda_operator
scaler plain
scaler tls --tls-ca "$TMP/pki/scaler-ca.crt" --tls-cert "$TMP/pki/wool-scaler.crt" --tls-key "$TMP/pki/wool-scaler.key"
HPA_OK=""
HPA_WHY="no network namespace (needs root and iproute2): the adapter's Endpoints cannot be loopback"
if [[ -n "$AGG_IP" && ( " $CASES " =~ " hpa " || " $CASES " =~ " scaledown " ) ]]; then
    if hpa_parts; then HPA_OK=1; else HPA_WHY="the metrics adapter's APIService never became Available (logs above)"; fi
fi
for c in $CASES; do
    case $c in
        activation) case_activation ;;
        pool) case_pool ;;
        stream) case_stream ;;
        tls) case_tls ;;
        unreachable) case_unreachable; [[ -n "$HPA_OK" ]] && case_unreachable fallback ;;
        hpa) if [[ -n "$HPA_OK" ]]; then case_hpa; else echo "== the HPA half: NOT RUN: $HPA_WHY"; RESULTS+=("hpa: not run: $HPA_WHY"); fi ;;
        churn) case_churn ;;
        podbounds) if ((${#SD_WORKERS[@]} == 0)); then pod_workers 3; fi; case_podbounds ;;
        scaledown) if [[ -n "$HPA_OK" ]]; then case_scaledown; else echo "== scale-down: NOT RUN: $HPA_WHY"; RESULTS+=("scaledown: not run: $HPA_WHY"); fi ;;
        manifests) case_manifests ;;
        *) say "unknown case $c"; FAILS+=("unknown case $c") ;;
    esac
done
echo
echo "== summary"
for r in "${RESULTS[@]}"; do echo "    $r"; done
if ((${#FAILS[@]})); then
    echo "failed checks:"; for f in "${FAILS[@]}"; do echo "    $f"; done
    exit 1
fi
echo "every check passed"
