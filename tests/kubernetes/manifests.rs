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
