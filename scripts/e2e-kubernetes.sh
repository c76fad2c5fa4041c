#!/usr/bin/env bash
# The Kubernetes suite: prepares what it needs, then runs it (a Rust test program,
# tests/kubernetes/, one trial a case: `cargo test --test kubernetes -- --ignored`).
#   ./scripts/e2e-kubernetes.sh                 every default case
#   ./scripts/e2e-kubernetes.sh scaledown       one case (the test runner's filter; --exact too)
#   ./scripts/e2e-kubernetes.sh --list          the cases
#   CHURN_MINUTES=10 ./scripts/e2e-kubernetes.sh churn   the deletion-cost measurement (only when named)
# What it prepares, each a second when already there: the pinned engine (scripts/ensure-engine.sh:
# etcd v3.6.13, kube-apiserver/kube-controller-manager v1.36.3, KEDA v2.21.0's operator and
# metrics adapter, KEDA's CRDs), Helm (scripts/ensure-helm.sh), the images' digests
# (scripts/images.sh, when dist/ has none), the Wool 0.15.7 venv (scripts/setup-venvs.sh) and
# the programs (wool-worker, wool-scaler, the burst example), and the Wool application's venv
# (target/venvs/wool-app-e2e: libwool-kubernetes and wool 0.15.7). It passes them to the program as
# WOOL_E2E_ENGINE, WOOL_E2E_HELM, WOOL_E2E_WORKER_DIGEST and WOOL_E2E_SCALER_DIGEST, and the
# chart as the release packages it (scripts/release-kubernetes.sh --chart) as WOOL_E2E_CHART.
# The program makes its own network namespace when it can (root, iproute2) and stops everything
# it started, whatever happens; knobs: SCALEDOWN_RUNS, SD_TASK, SD_WINDOW, WOOL_RUNS, CHURN_*,
# WOOL_E2E_KEEP=1 (keep the temporary folder), WOOL_TEST_REQUIRE_NETNS=1 (no namespace fails).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

say() { printf '%s  e2e  %s\n' "$(date -u +%T.%3N)" "$*" >&2; }

args=("$@")
if [[ -n "${E2E_CASES:-}" ]]; then   # the former way of choosing cases: one name is the filter
    read -r -a chosen <<<"$E2E_CASES"
    if ((${#chosen[@]} != 1)); then
        say "E2E_CASES names one case now (the filter); for several, run the script once per case"
        exit 2
    fi
    args=(--exact "${chosen[0]}" "${args[@]}")
fi

started=$SECONDS
WOOL_E2E_ENGINE="$(./scripts/ensure-engine.sh)"
say "engine ready in $((SECONDS - started)) s: $WOOL_E2E_ENGINE"
WOOL_E2E_HELM="$(./scripts/ensure-helm.sh)"
version="$(sed -n 's/^version = "\(.*\)"$/\1/p' cli/wool-scaler/Cargo.toml | head -1)"
[[ -f "dist/wool-worker-$version.digest" && -f "dist/wool-scaler-$version.digest" ]] || ./scripts/images.sh >&2
WOOL_E2E_WORKER_DIGEST="$(cat "dist/wool-worker-$version.digest")"
WOOL_E2E_SCALER_DIGEST="$(cat "dist/wool-scaler-$version.digest")"
say "images (dist/, scripts/images.sh): wool-worker $WOOL_E2E_WORKER_DIGEST, wool-scaler $WOOL_E2E_SCALER_DIGEST"
WOOL_E2E_CHART="$(./scripts/release-kubernetes.sh --chart target/e2e-chart)"
export WOOL_E2E_ENGINE WOOL_E2E_HELM WOOL_E2E_WORKER_DIGEST WOOL_E2E_SCALER_DIGEST WOOL_E2E_CHART
[[ -x target/venvs/wool-0.15.7/bin/python ]] || ./scripts/setup-venvs.sh >&2
# The Wool application's venv (the wool_* cases): libwool-kubernetes installed from a copy of
# integrations/libwool-kubernetes (as its users install it) with wool 0.15.7; made again when
# the package changes.
app_venv=target/venvs/wool-app-e2e
stamp="$(cd integrations/libwool-kubernetes && find pyproject.toml src -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16)"
if [[ "$(cat "$app_venv/.stamp" 2>/dev/null)" != "$stamp" ]]; then
    copy="$(mktemp -d)"
    cp -r integrations/libwool-kubernetes/{pyproject.toml,README.md,LICENSE,src} "$copy/"
    python3 -m venv --clear "$app_venv"
    "$app_venv/bin/python" -m pip install --quiet --disable-pip-version-check "$copy" "wool==0.15.7" >&2
    rm -rf "$copy"
    echo "$stamp" >"$app_venv/.stamp"
fi
cargo build --workspace --bins --example burst >&2
exec cargo test --test kubernetes -- --ignored "${args[@]}"
