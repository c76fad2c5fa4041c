#!/usr/bin/env bash
# Remakes the pod JSON of this folder from a real kube-apiserver v1.36.3 with etcd (the engine
# scripts/ensure-engine.sh builds), on loopback, no kubelet: the test plays the kubelet's part
# for status (podIP, conditions), and a pod bound to a node gets a deletionTimestamp on delete.
#
#   integrations/libwool-kubernetes/tests/data/capture-pods.sh [ENGINE_BIN_DIR]
#
# Needs curl, openssl, python3. Stops what it started when done.
set -euo pipefail
DATA="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ENGINE="${1:-$("$DATA/../../../../scripts/ensure-engine.sh")/bin}"
W="$(mktemp -d)"; cd "$W"
# Throwaway processes over a throwaway etcd: killed outright (kube-apiserver waits long on TERM).
trap 'kill -KILL $(cat "$W"/*.pid) 2>/dev/null; wait 2>/dev/null; rm -rf "$W"' EXIT
free() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
E1=$(free); E2=$(free); E3=$(free); API=$(free)
openssl genrsa -out sa.key 2048 2>/dev/null; openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
TOKEN=$(python3 -c 'import uuid;print(uuid.uuid4().hex)'); echo "$TOKEN,admin,admin,system:masters" > tokens.csv
$ENGINE/etcd --name e --data-dir etcd --listen-client-urls http://127.0.0.1:$E1 --advertise-client-urls http://127.0.0.1:$E1 \
  --listen-peer-urls http://127.0.0.1:$E2 --initial-advertise-peer-urls http://127.0.0.1:$E2 --initial-cluster e=http://127.0.0.1:$E2 \
  --listen-metrics-urls http://127.0.0.1:$E3 > etcd.log 2>&1 & echo $! > etcd.pid
$ENGINE/kube-apiserver --etcd-servers=http://127.0.0.1:$E1 --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port=$API \
  --cert-dir=$W/certs --token-auth-file=$W/tokens.csv --authorization-mode=RBAC --service-account-key-file=$W/sa.pub \
  --service-account-signing-key-file=$W/sa.key --service-account-issuer=https://kubernetes.default.svc --service-cluster-ip-range=10.96.0.0/24 \
  > apiserver.log 2>&1 & echo $! > apiserver.pid
K() { curl -sSk -H "Authorization: Bearer $TOKEN" "$@"; }
for i in $(seq 120); do K -f https://127.0.0.1:$API/readyz >/dev/null 2>&1 && break; sleep 1; done
B=https://127.0.0.1:$API/api/v1
K -X POST -H 'Content-Type: application/json' $B/namespaces -d '{"metadata":{"name":"batch"}}' >/dev/null
K -X POST -H 'Content-Type: application/json' $B/namespaces/batch/serviceaccounts -d '{"metadata":{"name":"default"}}' >/dev/null
pod() { # name
cat <<JSON
{"apiVersion":"v1","kind":"Pod","metadata":{"name":"$1","namespace":"batch",
 "labels":{"app":"wool","app.kubernetes.io/name":"wool-worker"},
 "annotations":{"wool.libwool.dev/version":"0.15.7","wool.libwool.dev/port":"50051","wool.libwool.dev/secure":"false","wool.libwool.dev/tags":"batch, gpu"}},
 "spec":{"nodeName":"node-1","terminationGracePeriodSeconds":120,"containers":[{"name":"worker","image":"my-app:1.0",
  "command":["wool-pod-worker","--import","app.routines"],"env":[{"name":"WOOL_GRACE_SECONDS","value":"110"}],
  "ports":[{"name":"wool","containerPort":50051},{"name":"probes","containerPort":8081}],
  "readinessProbe":{"httpGet":{"path":"/readyz","port":"probes"},"periodSeconds":2},
  "livenessProbe":{"httpGet":{"path":"/livez","port":"probes"},"periodSeconds":10}}]}}
JSON
}
status() { # name ip ready
  K -X PATCH -H 'Content-Type: application/merge-patch+json' $B/namespaces/batch/pods/$1/status -d "{\"status\":{\"phase\":\"Running\",\"podIP\":\"$2\",\"podIPs\":[{\"ip\":\"$2\"}],\"hostIP\":\"10.250.0.1\",\"startTime\":\"2026-12-07T19:00:00Z\",\"conditions\":[{\"type\":\"PodReadyToStartContainers\",\"status\":\"True\",\"lastTransitionTime\":\"2026-12-07T19:00:01Z\"},{\"type\":\"Initialized\",\"status\":\"True\",\"lastTransitionTime\":\"2026-12-07T19:00:01Z\"},{\"type\":\"Ready\",\"status\":\"$3\",\"lastTransitionTime\":\"2026-12-07T19:00:03Z\"},{\"type\":\"ContainersReady\",\"status\":\"$3\",\"lastTransitionTime\":\"2026-12-07T19:00:03Z\"},{\"type\":\"PodScheduled\",\"status\":\"True\",\"lastTransitionTime\":\"2026-12-07T19:00:00Z\"}]}}" >/dev/null
}
for n in worker-ready worker-pending worker-not-ready worker-terminating; do
  pod $n | K -X POST -H 'Content-Type: application/json' $B/namespaces/batch/pods -d @- >/dev/null
done
status worker-ready 10.244.0.7 True
status worker-not-ready 10.244.0.8 False
status worker-terminating 10.244.0.9 True
K -X DELETE "$B/namespaces/batch/pods/worker-terminating?gracePeriodSeconds=120" >/dev/null
for n in ready pending not-ready terminating; do
  K $B/namespaces/batch/pods/worker-$n | python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin), indent=1))' > "$DATA/pod-$n.json"
done
ls -l "$DATA"/pod-*.json
