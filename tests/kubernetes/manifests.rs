//! The chart as an operator installs it: its default values and every documented combination
//! (`charts/wool-scaler/ci/*-values.yaml`), each rendered by `helm template` into a namespace of
//! its own and applied server-side (not a dry run). The ScaledObjects go in paused (the
//! `scaledObject.annotations` value): their scalerAddress is a cluster name, and KEDA would look
//! it up in DNS. The NetworkPolicies are accepted by the API server (no network plugin runs
//! here: nothing enforces them).

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::ListParams;
use kube::Api;

use crate::api;
use crate::chart::{self, set_json};
use crate::engine::Engine;
use crate::timeline::Checks;
use crate::Verdict;

/// The image of the first container of Deployment `ns/name`.
async fn image(engine: &Engine, ns: &str, name: &str) -> String {
    Api::<Deployment>::namespaced(engine.client.clone(), ns)
        .get(name)
        .await
        .ok()
        .and_then(|d| d.spec?.template.spec?.containers.first()?.image.clone())
        .unwrap_or_default()
}

pub async fn manifests(engine: &'static Engine) -> Verdict {
    println!("\n== the chart's manifests (default values and every documented combination), applied server-side");
    let mut combinations = vec![None];
    let mut files: Vec<_> = std::fs::read_dir(engine.setup.chart().join("ci"))
        .map_err(|e| e.to_string())?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.to_string_lossy().ends_with("-values.yaml"))
        .collect();
    files.sort();
    combinations.extend(files.into_iter().map(Some));
    let mut checks = Checks::new("manifests", "namespaces docs-0 to docs-N");
    let mut accepted = true;
    let mut namespace_of = std::collections::HashMap::new();
    for (n, combination) in combinations.iter().enumerate() {
        let ns = format!("docs-{n}");
        let label = combination
            .as_ref()
            .and_then(|p| p.file_name())
            .map_or("default".to_string(), |f| f.to_string_lossy().into_owned());
        namespace_of.insert(label.clone(), ns.clone());
        api::ensure_namespace(&engine.client, &ns).await?;
        let mut values = Vec::new();
        if let Some(file) = combination {
            values.extend(["-f".to_string(), file.display().to_string()]);
        }
        values.extend(set_json(
            "scaledObject.annotations",
            r#"{"autoscaling.keda.sh/paused":"true"}"#,
        ));
        match chart::render_apply(engine, "wool", &ns, &values).await {
            Ok(applied) => println!("    {label} (namespace {ns}): {}", applied.join("; ")),
            Err(refusal) => {
                println!("    {label}: REFUSED: {refusal}");
                accepted = false;
            }
        }
    }
    checks.check(
        accepted,
        "every rendering accepted by kube-apiserver (KEDA's CRDs validating the ScaledObjects)",
    );
    let default_ns = &namespace_of["default"];
    let scaler_image = image(engine, default_ns, "wool-scaler").await;
    checks.check(
        scaler_image == format!("ghcr.io/libwool/wool-scaler@{}", engine.setup.scaler_digest),
        format!("the scaler's Deployment names the image scripts/images.sh built, by digest ({scaler_image})"),
    );
    // ci/namespace-values.yaml names the workers' image by a digest of its own; the suite's wins.
    let workers_ns = namespace_of
        .get("namespace-values.yaml")
        .cloned()
        .unwrap_or_default();
    let worker_image = image(engine, &workers_ns, "wool-workers").await;
    checks.check(
        worker_image == format!("ghcr.io/libwool/wool-worker@{}", engine.setup.worker_digest),
        format!("the workers' Deployment names the image scripts/images.sh built, by digest ({worker_image})"),
    );
    let policies = Api::<NetworkPolicy>::namespaced(engine.client.clone(), default_ns)
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    checks.check(
        policies.len() == 1,
        format!(
            "the default values' NetworkPolicy stored (API server acceptance only: no CNI enforces it): {}",
            policies.len()
        ),
    );
    let selected = policies
        .iter()
        .find(|p| p.metadata.name.as_deref() == Some("wool-scaler"))
        .and_then(|p| {
            let from = p
                .spec
                .as_ref()?
                .ingress
                .as_ref()?
                .first()?
                .from
                .as_ref()?
                .first()?
                .clone();
            from.pod_selector?.match_labels?.get("app").cloned()
        })
        .unwrap_or_default();
    checks.check(
        selected == "keda-operator",
        format!("the scaler's policy lets KEDA's operator reach 9090 (its first rule; the Wool clients, for demand, are the second), as rendered (podSelector app={selected})"),
    );
    checks.verdict()
}

/// Runs the pinned Helm against the engine's API server as the admin, in namespace `ns`; its
/// output, or its message.
fn helm(engine: &Engine, ns: &str, args: &[&str]) -> Result<String, String> {
    chart::run_helm(
        std::process::Command::new(&engine.setup.helm)
            .args(args)
            .arg("--kubeconfig")
            .arg(&engine.kubeconfig)
            .args(["--namespace", ns]),
        args.first().unwrap_or(&""),
    )
}

/// The packaged chart as users install it: `helm install` of the archive the release's
/// `helm package` made (`scripts/release-kubernetes.sh --chart`, named by WOOL_E2E_CHART), with
/// the Wool application's documented values, by Helm itself against the API server (not a dry
/// run), then `helm uninstall`.
pub async fn packaged(engine: &'static Engine) -> Verdict {
    println!("\n== the packaged chart: helm install from the archive, then helm uninstall");
    let archive = std::env::var("WOOL_E2E_CHART")
        .ok()
        .filter(|p| std::path::Path::new(p).is_file())
        .ok_or(
            "precondition not met: WOOL_E2E_CHART names no packaged chart; \
             `scripts/release-kubernetes.sh --chart DIR` makes it (./scripts/e2e-kubernetes.sh does)",
        )?;
    let ns = "e2e-helm";
    let values = engine.setup.chart().join("ci/wool-workers-values.yaml");
    let scaler_digest = format!("image.digest={}", engine.setup.scaler_digest);
    let mut checks = Checks::new("packaged", format!("{ns}/wool from {archive}"));
    let installed = helm(
        engine,
        ns,
        &[
            "install",
            "wool",
            &archive,
            "--create-namespace",
            "-f",
            &values.display().to_string(),
            "--set",
            &scaler_digest,
            "--set-json",
            r#"scaledObject.annotations={"autoscaling.keda.sh/paused":"true"}"#,
        ],
    );
    if let Err(e) = &installed {
        println!("    {e}");
    }
    checks.check(
        installed.is_ok(),
        format!("helm install wool {archive} succeeds"),
    );
    let status = helm(engine, ns, &["status", "wool", "-o", "json"]).unwrap_or_default();
    let status: serde_json::Value = serde_json::from_str(&status).unwrap_or_default();
    let state = status["info"]["status"].as_str().unwrap_or("-").to_owned();
    checks.check(
        state == "deployed",
        format!("the release is deployed ({state})"),
    );
    let scaler = image(engine, ns, "wool-scaler").await;
    let workers = image(engine, ns, "wool-workers").await;
    checks.check(
        scaler == format!("ghcr.io/libwool/wool-scaler@{}", engine.setup.scaler_digest)
            && workers == "registry.example/my-app:1.0",
        format!(
            "its Deployments are stored, with their images (scaler {scaler}, workers {workers})"
        ),
    );
    let scaled = api::scaled_objects(&engine.client, ns)
        .get("wool-workers")
        .await
        .is_ok();
    checks.check(
        scaled,
        "its ScaledObject wool-workers is stored (KEDA's CRD validating it)",
    );
    let removed = helm(engine, ns, &["uninstall", "wool"]);
    checks.check(
        removed.is_ok(),
        format!("helm uninstall succeeds ({:?})", removed.err()),
    );
    let gone = api::wait_until(std::time::Duration::from_secs(60), || async {
        image(engine, ns, "wool-scaler").await.is_empty()
    })
    .await;
    checks.check(gone, "and its Deployments are gone");
    println!("    packaged chart {archive}: {state}, then uninstalled");
    crate::result(format!(
        "packaged: helm install from {archive}: {state}; uninstalled"
    ));
    checks.verdict()
}
