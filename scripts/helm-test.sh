#!/usr/bin/env bash
# Tests the Helm chart charts/wool-scaler with the pinned Helm (scripts/ensure-helm.sh, v4.3.2):
#   - `helm lint --strict` and `helm template` for the default values and every documented
#     combination (charts/wool-scaler/ci/*-values.yaml, each named in docs/kubernetes.md), and
#     what each rendering holds: the scaler's Deployment, Service and token-less ServiceAccount,
#     no RBAC objects, probes, resources and the restrictive security context on every
#     container, the TLS Secrets mounted and flagged, the NetworkPolicies, the ScaledObject's
#     fleet, thresholds and timings, images named by digest when one is given; for
#     workers.kind wool the entrypoint's command, flags, grace, HTTP probes and the annotations
#     KubernetesDiscovery reads; the clients' Role, the demand flags and the scaler's policy
#     admitting the Wool clients; scaledObject.extraTriggers appended;
#   - the bad values of tests/helm/bad/*.yaml: `helm template`
#     fails on each, and its message names the field (each file's `# expect:` line);
#   - docs/kubernetes.md: every YAML block it quotes is lines of a chart file, unchanged, in order.
# The rendered manifests are applied to a real API server with KEDA's CRDs by
# scripts/e2e-kubernetes.sh. A few seconds once Helm is built.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
HELM="$(./scripts/ensure-helm.sh)"
CHART=charts/wool-scaler
TMP="$(mktemp -d /tmp/wool-helm.XXXXXX)"
trap 'rm -rf "$TMP"' EXIT
fails=0
check() { # description command...
    local what=$1; shift
    if "$@"; then echo "    ok: $what"; else echo "    FAILED: $what"; fails=$((fails + 1)); fi
}
PY=python3
if ! "$PY" -c 'import yaml' 2>/dev/null; then
    [[ -x target/venvs/helm-test/bin/python ]] ||
        { python3 -m venv target/venvs/helm-test && target/venvs/helm-test/bin/pip install -q pyyaml==6.0.3; } >&2
    PY=target/venvs/helm-test/bin/python
fi
echo "== $("$HELM" version --short)"
crate="$(sed -n 's/^version = "\(.*\)"$/\1/p' cli/wool-scaler/Cargo.toml | head -1)"
check "the chart's appVersion is wool-scaler's version ($crate): the images' tag" \
    grep -qx "appVersion: \"$crate\"" "$CHART/Chart.yaml"

# Default values, then each documented combination.
combos=(default)
for f in "$CHART"/ci/*-values.yaml; do combos+=("$f"); done
for c in "${combos[@]}"; do
    args=()
    [[ $c != default ]] && args=(-f "$c")
    name="$(basename "$c" .yaml)"
    echo "== $name"
    if out="$("$HELM" lint --strict "$CHART" "${args[@]}" 2>&1)"; then
        echo "    ok: helm lint --strict ($(tail -1 <<<"$out"))"
    else
        echo "    FAILED: helm lint --strict:"; sed 's/^/      /' <<<"$out"; fails=$((fails + 1)); continue
    fi
    if ! "$HELM" template wool "$CHART" --namespace wool "${args[@]}" > "$TMP/$name.yaml" 2> "$TMP/$name.err"; then
        echo "    FAILED: helm template:"; sed 's/^/      /' "$TMP/$name.err"; fails=$((fails + 1)); continue
    fi
    # What the rendering must hold, given the values it came from.
    if "$PY" - "$TMP/$name.yaml" "$c" <<'PY'; then echo "    ok: helm template: $(grep -c '^kind:' "$TMP/$name.yaml") objects, each as its values ask"; else fails=$((fails + 1)); fi
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
values = {} if sys.argv[2] == "default" else yaml.safe_load(open(sys.argv[2]))
app_version = yaml.safe_load(open("charts/wool-scaler/Chart.yaml"))["appVersion"]
def get(path, default=None):
    v = values
    for k in path.split("."):
        if not isinstance(v, dict) or k not in v: return default
        v = v[k]
    return v
bad = []
def want(cond, what):
    if not cond: bad.append(what)
by = {}
for d in docs: by.setdefault(d["kind"], []).append(d)
rbac = bool(get("rbac.pods"))
client_rbac = bool(get("client.rbac.create"))
want(not any(k in by for k in ("ClusterRole", "ClusterRoleBinding")), "no cluster-wide RBAC objects")
roles = {d["metadata"]["name"]: d for d in by.get("Role", [])}
bindings = {d["metadata"]["name"]: d for d in by.get("RoleBinding", [])}
want(sorted(roles) == sorted(bindings) == sorted((["wool-scaler"] if rbac else []) + (["wool-client"] if client_rbac else [])),
     f"a Role and RoleBinding for the scaler iff rbac.pods, for the clients iff client.rbac.create: {sorted(roles)}")
if rbac:
    verbs = roles["wool-scaler"]["rules"][0]["verbs"]
    want(roles["wool-scaler"]["rules"][0]["resources"] == ["pods"], "the Role is on pods only")
    want(verbs == ["get", "list", "watch"] + (["patch"] if get("rbac.deletionCost") else []), f"the Role's verbs {verbs}")
if client_rbac:
    rule = roles["wool-client"]["rules"]
    want(rule == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}], f"the clients' Role: get/list/watch on pods ({rule})")
    subjects = [(s["name"], s["namespace"]) for s in bindings["wool-client"]["subjects"]]
    accounts = [get("client.serviceAccountName")] + ([get("workers.serviceAccountName")] if get("workers.enabled") and get("workers.serviceAccountName") else [])
    want(subjects == [(a, "wool") for a in accounts], f"the clients' RoleBinding subjects {subjects}")
want([d["metadata"]["name"] for d in by.get("ServiceAccount", [])] == ["wool-scaler"], "the scaler's ServiceAccount")
want(all(d.get("automountServiceAccountToken") is rbac for d in by.get("ServiceAccount", [])), "an API token iff rbac.pods")
deps = {d["metadata"]["name"]: d for d in by.get("Deployment", [])}
workers = bool(get("workers.enabled"))
wool = workers and get("workers.kind") == "wool"
want(sorted(deps) == sorted(["wool-scaler"] + (["wool-workers"] if workers else [])), f"Deployments {sorted(deps)}")
want(any(d["metadata"]["name"] == "wool-scaler" and d["spec"]["ports"][0]["port"] == 9090 for d in by.get("Service", [])), "the scaler's Service on 9090")
for name, d in deps.items():
    pod = d["spec"]["template"]["spec"]
    want(pod["securityContext"].get("runAsNonRoot") is True and pod["securityContext"].get("runAsUser") == 65532, f"{name}: non-root, UID 65532")
    token = rbac if name == "wool-scaler" else bool(get("workers.serviceAccountName"))
    want(pod.get("automountServiceAccountToken") is token, f"{name}: an API token only for the scaler with rbac.pods, the workers with serviceAccountName")
    for c in pod["containers"]:
        sc = c["securityContext"]
        want(sc.get("readOnlyRootFilesystem") is True, f"{name}: read-only root")
        want(sc.get("allowPrivilegeEscalation") is False, f"{name}: no privilege escalation")
        want(sc.get("capabilities", {}).get("drop") == ["ALL"], f"{name}: every capability dropped")
        if name == "wool-workers" and wool:
            want(c.get("readinessProbe", {}).get("httpGet") == {"path": "/readyz", "port": "health"}
                 and c.get("livenessProbe", {}).get("httpGet") == {"path": "/livez", "port": "health"}, f"{name}: HTTP probes /readyz, /livez")
        else:
            want("grpc" in c.get("readinessProbe", {}) and "tcpSocket" in c.get("livenessProbe", {}), f"{name}: probes")
        want(c.get("resources", {}).get("requests"), f"{name}: resources")
        image = c["image"]
        digest = get("workers.image.digest" if name == "wool-workers" else "image.digest")
        if digest:
            want(image.endswith("@" + digest), f"{name}: the image named by digest ({image})")
        elif name == "wool-workers" and wool:
            want(image == f"{get('workers.image.repository')}:{get('workers.image.tag')}", f"{name}: the application's image ({image})")
        else:
            want(image.endswith(":" + app_version), f"{name}: the image tagged with the appVersion ({image})")
        args = c["args"]
        if name == "wool-scaler":
            tls = get("scaler.tls.enabled")
            want(("--tls-cert=/etc/wool-scaler/serving/tls.crt" in args) == bool(tls), f"{name}: TLS flags iff scaler.tls.enabled")
            want(("--one-way" in args) == bool(get("scaler.tls.oneWay") and tls), f"{name}: --one-way iff scaler.tls.oneWay")
            want(("--tls-files-dir=/tls" in args) == bool(get("scaler.workerTls.secretName")), f"{name}: --tls-files-dir iff scaler.workerTls")
            secrets = sorted(v["secret"]["secretName"] for v in pod.get("volumes", []))
            want(secrets == sorted(filter(None, [get("scaler.tls.secretName") if tls else None, get("scaler.workerTls.secretName")])), f"{name}: Secrets mounted {secrets}")
            want(d["spec"]["replicas"] == get("scaler.replicas", 1), f"{name}: replicas")
            demand = [a for a in args if "demand" in a]
            if get("scaler.demand.enabled", True):
                dv = {"ttl": "30s", "maxScaledObjects": 1024, "maxClientsPerScaledObject": 256, "maxWaiting": 100000, "reportsPerSecond": 10}
                dv.update(get("scaler.demand", {}))
                want(demand == [f"--demand-ttl={dv['ttl']}", f"--max-demand-scaled-objects={dv['maxScaledObjects']}",
                                f"--max-demand-clients-per-scaled-object={dv['maxClientsPerScaledObject']}",
                                f"--max-demand-waiting={dv['maxWaiting']}", f"--demand-reports-per-second={dv['reportsPerSecond']}"],
                     f"{name}: the demand flags of scaler.demand ({demand})")
            else:
                want(demand == ["--no-demand"], f"{name}: --no-demand iff scaler.demand.enabled is false ({demand})")
        else:
            want(("--tls-key=/tls/tls.key" in args) == bool(get("workers.tls.enabled")), f"{name}: TLS flags iff workers.tls.enabled")
            want(("replicas" in d["spec"]) == (get("workers.replicas") is not None), f"{name}: replicas only when given")
            ann = d["spec"]["template"]["metadata"].get("annotations", {})
            tgps = get("workers.terminationGracePeriodSeconds", 120)
            want(pod["terminationGracePeriodSeconds"] == tgps, f"{name}: terminationGracePeriodSeconds")
            if wool:
                grace = get("workers.grace")
                grace = tgps - 10 if grace is None else grace
                want(c.get("command") == ["wool-pod-worker"], f"{name}: the entrypoint wool-pod-worker ({c.get('command')})")
                imports = [f"--import={m}" for m in get("workers.wool.imports")]
                want(args[:len(imports)] == imports and f"--port={get('workers.port', 50051)}" in args
                     and f"--health-port={get('workers.healthPort', 8081)}" in args and f"--grace={grace}" in args,
                     f"{name}: --import each module, --port, --health-port, --grace ({args})")
                want({"name": "WOOL_GRACE_SECONDS", "value": str(grace)} in c.get("env", []), f"{name}: WOOL_GRACE_SECONDS")
                want(all(e in c.get("env", []) for e in get("workers.env", [])), f"{name}: workers.env")
                want(grace < tgps, f"{name}: a grace ({grace}) under terminationGracePeriodSeconds ({tgps})")
                want(ann.get("wool.libwool.dev/version") == get("workers.wool.version")
                     and ann.get("wool.libwool.dev/port") == str(get("workers.port", 50051))
                     and ann.get("wool.libwool.dev/secure") == ("true" if get("workers.tls.enabled") else "false"),
                     f"{name}: the annotations KubernetesDiscovery reads ({ann})")
                want(ann.get("wool.libwool.dev/identity") == (get("workers.wool.identity") or None), f"{name}: the identity annotation iff workers.wool.identity")
                want(ann.get("wool.libwool.dev/tags") == (",".join(get("workers.wool.tags", [])) or None), f"{name}: the tags annotation iff workers.wool.tags")
                want(not any(k.startswith("prometheus.io/") for k in ann) and "metrics" not in [p["name"] for p in c["ports"]],
                     f"{name}: no metrics port, no Prometheus annotations")
            else:
                want("command" not in c and ann.get("prometheus.io/port") == "9100", f"{name}: the image's entrypoint, scraped on 9100")
                want(not any(k.startswith("wool.libwool.dev/") for k in ann), f"{name}: no discovery annotations for kind reference")
nps = {d["metadata"]["name"]: d for d in by.get("NetworkPolicy", [])}
if get("networkPolicy.enabled", True):
    want(sorted(nps) == sorted(["wool-scaler"] + (["wool-workers"] if workers else [])), f"NetworkPolicies {sorted(nps)}")
    ingress = nps["wool-scaler"]["spec"]["ingress"]
    rule = ingress[0]
    want(rule["from"][0]["podSelector"]["matchLabels"] == {"app": "keda-operator"} and rule["ports"] == [{"port": 9090}], "KEDA's operator reaches 9090")
    grpc = [r["from"] for r in ingress if r["ports"] == [{"port": 9090}]]
    clients = [{"podSelector": {"matchLabels": get("networkPolicy.workerClientLabels", {"wool-client": "true"})}}]
    want(grpc == [rule["from"]] + ([clients] if get("scaler.demand.enabled", True) else []),
         "9090: KEDA's operator, and the Wool clients (workerClientLabels) iff scaler.demand.enabled")
    if workers:
        wrule = nps["wool-workers"]["spec"]["ingress"]
        want(any(r["ports"] == [{"port": 9100}] for r in wrule) != wool, "the workers' metrics port admitted iff kind reference")
else:
    want(not nps, "no NetworkPolicy when disabled")
sos = by.get("ScaledObject", [])
if get("scaledObject.enabled"):
    want(len(sos) == 1, "one ScaledObject")
    so = sos[0]["spec"]
    t = so["triggers"][0]
    m = t["metadata"]
    want(t["type"] == get("scaledObject.triggerType", "external-push"), "the trigger type")
    want(m["scalerAddress"] == "wool-scaler.wool.svc:9090", f"scalerAddress {m['scalerAddress']}")
    source = get("scaledObject.fleet.source")
    keys = {"dns": {"dnsName", "port"}, "targets": {"targets"}, "namespace": {"namespace", "discovery"}, "pods": {"podSelector", "port"}}[source]
    want(keys <= set(m) and not (set().union(*({"dnsName", "port"}, {"targets"}, {"namespace", "discovery"}, {"podSelector"})) - keys) & set(m), f"the fleet's keys for {source}: {sorted(m)}")
    want((m.get("deletionCost") == "true") == bool(get("scaledObject.deletionCost")), "deletionCost iff scaledObject.deletionCost")
    if source == "pods" and not get("scaledObject.fleet.podSelector"):
        want(m["podSelector"] == "app.kubernetes.io/name=wool-worker,app.kubernetes.io/instance=wool", "podSelector: the workers' pods")
    if source == "dns" and not get("scaledObject.fleet.dnsName"):
        want(m["dnsName"] == "wool-workers-headless.wool.svc.cluster.local", "dnsName: the workers' headless Service")
    if source == "targets":
        want(m["targets"] == ",".join(get("scaledObject.fleet.targets")), "targets joined by commas")
    want(m["idleThreshold"] == str(get("scaledObject.idleThreshold", "5m")), "idleThreshold")
    want(m["targetValue"] == str(get("scaledObject.targetValue", 1)), "targetValue")
    for k, dflt in (("pollingInterval", 15), ("cooldownPeriod", 300), ("minReplicaCount", 0), ("maxReplicaCount", 50)):
        want(so[k] == get("scaledObject." + k, dflt), k)
    want(so.get("fallback", {}) == get("scaledObject.fallback", {}), "fallback")
    want(so["scaleTargetRef"]["name"] == (get("scaledObject.scaleTargetName") or "wool-workers"), "scaleTargetRef")
    tls = get("scaler.tls.enabled")
    want((m.get("enableTLS") == "true") == bool(tls) and ("authenticationRef" in t) == bool(tls), "enableTLS and authenticationRef iff scaler.tls.enabled")
    tas = by.get("TriggerAuthentication", [])
    want(len(tas) == (1 if tls else 0), "a TriggerAuthentication iff TLS")
    if tls:
        params = sorted(r["parameter"] for r in tas[0]["spec"]["secretTargetRef"])
        want(params == sorted(["caCert"] + (["tlsClientCert", "tlsClientKey"] if get("scaler.tls.kedaClientSecretName") else [])), f"TriggerAuthentication parameters {params}")
    want(("workerTlsCa" in m) == bool(get("scaler.workerTls.secretName")), "workerTls* iff scaler.workerTls")
    want(so["triggers"][1:] == get("scaledObject.extraTriggers", []), "scaledObject.extraTriggers appended to the scaler's trigger")
else:
    want(not sos and "TriggerAuthentication" not in by, "no ScaledObject when disabled")
for b in bad: print(f"    FAILED: {sys.argv[2]}: {b}")
sys.exit(1 if bad else 0)
PY
done

echo "== bad values: helm template fails, naming the field"
for f in tests/helm/bad/*.yaml; do
    expect="$(sed -n 's/^# expect: //p' "$f")"
    if "$HELM" template wool "$CHART" -f "$f" > /dev/null 2> "$TMP/bad.err"; then
        echo "    FAILED: $(basename "$f"): helm template passed"; fails=$((fails + 1))
    else
        msg="$(grep -v '^$' "$TMP/bad.err" | tr '\n' ' ' | tr -s ' ')"
        check "$(basename "$f" .yaml): refused with \"${msg:0:240}\"" grep -qF -- "$expect" "$TMP/bad.err"
    fi
done

echo "== docs/kubernetes.md quotes the chart"
# Every YAML block of docs/kubernetes.md is lines of one chart file (values, a documented
# combination, a template), in order, unchanged; each documented combination is named there.
check "every YAML block is lines of a chart file; every ci/*-values.yaml named" \
    "$PY" - docs/kubernetes.md "$CHART"/values.yaml "$CHART"/ci/*-values.yaml "$CHART"/templates/*.yaml <<'PY'
import re, sys
page = open(sys.argv[1]).read()
files = {f: open(f).read().splitlines() for f in sys.argv[2:]}
ok = True
for f in files:
    if "/ci/" in f and f not in page:
        print(f"      {f} is not named in docs/kubernetes.md"); ok = False
for block in re.findall(r"^```yaml\n(.*?)^```$", page, flags=re.M | re.S):
    lines = block.splitlines()
    def within(text):
        return any(text[i:i + len(lines)] == lines for i in range(len(text) - len(lines) + 1))
    if not any(within(text) for text in files.values()):
        print("      a YAML block of docs/kubernetes.md is in no chart file:\n" + block); ok = False
sys.exit(0 if ok else 1)
PY

if ((fails)); then echo "helm tests: $fails failed"; exit 1; fi
echo "every helm check passed"
