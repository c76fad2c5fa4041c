//! The chart as the cases apply it: `helm template` (the pinned Helm) renders
//! `charts/wool-scaler` with the images named by the digests `scripts/images.sh` printed, and
//! each rendered object is applied server-side (kube-rs `Patch::Apply`, field manager
//! `wool-e2e`), its kind resolved through discovery.

use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::sync::Mutex;

use kube::api::{Patch, PatchParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use kube::discovery::{self, Scope};
use kube::{Api, Client};

use crate::engine::Engine;

/// The field manager of every apply.
const MANAGER: &str = "wool-e2e";

/// Each kind's resource and scope, as discovery answered.
static KINDS: Mutex<Option<HashMap<GroupVersionKind, (ApiResource, bool)>>> = Mutex::new(None);

/// The suite's timings, in seconds: a worker idle for less than `IDLE` is busy; KEDA polls
/// every `POLL` and goes to zero `COOL` after the last active poll.
pub const IDLE: u64 = 3;
pub const POLL: u64 = 2;
pub const COOL: u64 = 6;

/// `--set key=value`.
pub fn set(key: &str, value: impl std::fmt::Display) -> [String; 2] {
    ["--set".into(), format!("{key}={value}")]
}

/// `--set-json key=json`.
pub fn set_json(key: &str, json: impl std::fmt::Display) -> [String; 2] {
    ["--set-json".into(), format!("{key}={json}")]
}

/// `--set-json` of the fleet's targets.
pub fn targets(addresses: &[&str]) -> [String; 2] {
    set_json(
        "scaledObject.fleet.targets",
        serde_json::to_string(addresses).unwrap(),
    )
}

/// Arguments as one list.
pub fn args<const N: usize>(groups: [&[String]; N]) -> Vec<String> {
    groups.iter().flat_map(|g| g.iter().cloned()).collect()
}

/// `helm template RELEASE charts/wool-scaler --namespace NS` with the images' digests and
/// `extra`; the rendered manifests, or Helm's message.
pub fn render(
    engine: &Engine,
    release: &str,
    ns: &str,
    extra: &[String],
) -> Result<String, String> {
    let setup = &engine.setup;
    run_helm(
        Command::new(&setup.helm)
            .arg("template")
            .arg(release)
            .arg(setup.chart())
            .args(["--namespace", ns])
            .args(set("image.digest", &setup.scaler_digest))
            .args(set("workers.image.digest", &setup.worker_digest))
            .args(extra),
        &format!("template {release}"),
    )
}

/// Runs a Helm `command` (`what` names it in a failure); its standard output, or its message.
pub fn run_helm(command: &mut Command, what: &str) -> Result<String, String> {
    let output = command
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("helm: {e}"))?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(format!(
            "helm {what} failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

/// The resource of `gvk` and whether it is namespaced, from discovery (cached).
async fn resource(client: &Client, gvk: &GroupVersionKind) -> Result<(ApiResource, bool), String> {
    if let Some(found) = KINDS.lock().unwrap().as_ref().and_then(|k| k.get(gvk)) {
        return Ok(found.clone());
    }
    let (resource, capabilities) = discovery::pinned_kind(client, gvk)
        .await
        .map_err(|e| format!("discovery of {gvk:?}: {e}"))?;
    let found = (resource, capabilities.scope == Scope::Namespaced);
    KINDS
        .lock()
        .unwrap()
        .get_or_insert_with(HashMap::new)
        .insert(gvk.clone(), found.clone());
    Ok(found)
}

/// Applies every object of the multi-document `yaml` server-side, the namespaced ones into
/// `ns`; what was applied (`Kind/name` each), or the first refusal.
pub async fn apply(client: &Client, ns: &str, yaml: &str) -> Result<Vec<String>, String> {
    // The chart's templates repeat a label in some objects' labels (the common labels, then the
    // selector's); as kubectl does, the last one wins (they agree).
    let options =
        serde_saphyr::options! { duplicate_keys: serde_saphyr::DuplicateKeyPolicy::LastWins };
    let documents: Vec<serde_json::Value> = serde_saphyr::from_multiple_with_options(yaml, options)
        .map_err(|e| format!("the manifests do not parse: {e}"))?;
    let mut applied = Vec::new();
    for document in documents.into_iter().filter(|d| d.is_object()) {
        let object: DynamicObject =
            serde_json::from_value(document).map_err(|e| format!("an object: {e}"))?;
        let types = object
            .types
            .clone()
            .ok_or("an object without apiVersion/kind")?;
        let gvk = GroupVersionKind::try_from(&types).map_err(|e| e.to_string())?;
        let name = object.metadata.name.clone().unwrap_or_default();
        let (resource, namespaced) = resource(client, &gvk).await?;
        let api: Api<DynamicObject> = if namespaced {
            Api::namespaced_with(client.clone(), ns, &resource)
        } else {
            Api::all_with(client.clone(), &resource)
        };
        api.patch(
            &name,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(&object),
        )
        .await
        .map_err(|e| format!("{}/{name} refused: {e}", types.kind))?;
        applied.push(format!("{}/{name}", types.kind));
    }
    Ok(applied)
}

/// Renders and applies; what was applied.
pub async fn render_apply(
    engine: &Engine,
    release: &str,
    ns: &str,
    extra: &[String],
) -> Result<Vec<String>, String> {
    let yaml = render(engine, release, ns, extra)?;
    apply(&engine.client, ns, &yaml).await
}

/// One case's objects: the workers' Deployment NAME (replicas 0: KEDA scales from there), its
/// headless Service and the ScaledObject NAME (with the TriggerAuthentication when the values
/// ask for TLS), from the chart with `tests/helm/e2e-values.yaml`, the suite's timings and the
/// case's values (`extra`: later ones win).
pub async fn apply_case(
    engine: &Engine,
    ns: &str,
    name: &str,
    extra: &[String],
) -> Result<(), String> {
    crate::api::ensure_namespace(&engine.client, ns).await?;
    let mut args = vec![
        "-f".to_string(),
        engine.setup.e2e_values().display().to_string(),
    ];
    args.extend(set("workers.name", name));
    args.extend(set("scaledObject.pollingInterval", POLL));
    args.extend(set("scaledObject.cooldownPeriod", COOL));
    args.extend(set("scaledObject.idleThreshold", format!("{IDLE}s")));
    args.extend(set("scaledObject.maxSweepAge", "1s"));
    args.extend(show_only(&[
        "templates/workers.yaml",
        "templates/scaledobject.yaml",
    ]));
    args.extend(extra.iter().cloned());
    render_apply(engine, name, ns, &args).await.map(|_| ())
}

/// `--show-only` for each template.
pub fn show_only(templates: &[&str]) -> Vec<String> {
    templates
        .iter()
        .flat_map(|t| ["--show-only".to_string(), t.to_string()])
        .collect()
}
