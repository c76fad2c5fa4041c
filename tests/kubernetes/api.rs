//! The API calls the cases make, through kube-rs: typed k8s-openapi objects for the built-in
//! kinds, `DynamicObject` for KEDA's ScaledObject.

use std::future::Future;
use std::path::Path;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Pod, ServiceAccount};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use kube::{Api, Client};

/// The annotation the ReplicaSet controller ranks pods by at a scale-down.
pub const DELETION_COST: &str = "controller.kubernetes.io/pod-deletion-cost";
/// The cost wool-scaler gives the idlest pods: deleted first.
pub const MARKED: &str = "-2147483648";

/// A client from a kubeconfig file.
pub async fn client(kubeconfig: &Path) -> Result<Client, String> {
    let config = Kubeconfig::read_from(kubeconfig).map_err(|e| e.to_string())?;
    let config = kube::Config::from_custom_kubeconfig(config, &KubeConfigOptions::default())
        .await
        .map_err(|e| e.to_string())?;
    Client::try_from(config).map_err(|e| e.to_string())
}

/// Whether the API server's `/readyz` answers ok.
pub async fn readyz(client: &Client) -> bool {
    let request = http::Request::get("/readyz").body(Vec::new()).unwrap();
    tokio::time::timeout(Duration::from_secs(5), client.request_text(request))
        .await
        .is_ok_and(|answer| answer.is_ok_and(|text| text.trim() == "ok"))
}

/// Waits up to `limit`, every half second, for `condition`; whether it held.
pub async fn wait_until<F, Fut>(limit: Duration, mut condition: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + limit;
    loop {
        if condition().await {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Sleeps `seconds` (fractions allowed).
pub async fn sleep(seconds: f64) {
    tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
}

fn already_exists(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 409)
}

fn not_found(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 404)
}

/// Creates namespace `name` unless it exists.
pub async fn ensure_namespace(client: &Client, name: &str) -> Result<(), String> {
    let namespace: Namespace = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}
    }))
    .unwrap();
    match Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if already_exists(&e) => Ok(()),
        Err(e) => Err(format!("namespace {name}: {e}")),
    }
}

/// Deletes namespace `name` without waiting.
pub async fn delete_namespace(client: &Client, name: &str) {
    let _ = Api::<Namespace>::all(client.clone())
        .delete(name, &DeleteParams::default())
        .await;
}

/// Creates ServiceAccount `ns/name` unless it exists (no serviceaccount controller runs: even
/// `default` is made here, or pod creation is refused).
pub async fn ensure_service_account(client: &Client, ns: &str, name: &str) -> Result<(), String> {
    let account: ServiceAccount = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}
    }))
    .unwrap();
    match Api::<ServiceAccount>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &account)
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if already_exists(&e) => Ok(()),
        Err(e) => Err(format!("serviceaccount {ns}/{name}: {e}")),
    }
}

/// A token of ServiceAccount `ns/name`, valid for an hour.
pub async fn token(client: &Client, ns: &str, name: &str) -> Result<String, String> {
    let request = serde_json::from_value(serde_json::json!({
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "spec": {"audiences": [], "expirationSeconds": 3600}
    }))
    .unwrap();
    let answer = Api::<ServiceAccount>::namespaced(client.clone(), ns)
        .create_token_request(name, &PostParams::default(), &request)
        .await
        .map_err(|e| format!("a token of {ns}/{name}: {e}"))?;
    answer
        .status
        .and_then(|s| s.token)
        .ok_or_else(|| format!("a token of {ns}/{name}: no status"))
}

/// Creates an object from its JSON form (e.g. a Secret, a Pod, a Deployment).
pub async fn create<K>(client: &Client, ns: &str, object: serde_json::Value) -> Result<(), String>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    let what = format!("{ns}/{}", object["metadata"]["name"]);
    let object: K = serde_json::from_value(object).map_err(|e| format!("{what}: {e}"))?;
    Api::<K>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &object)
        .await
        .map(|_| ())
        .map_err(|e| format!("creating {what}: {e}"))
}

/// Deployment `ns/name`'s `spec.replicas`, `None` when it cannot be read.
pub async fn replicas(client: &Client, ns: &str, name: &str) -> Option<i32> {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    deployments.get(name).await.ok()?.spec?.replicas
}

/// Scales Deployment `ns/name` to `replicas` through its scale subresource.
pub async fn scale(client: &Client, ns: &str, name: &str, replicas: i32) -> Result<(), String> {
    Api::<Deployment>::namespaced(client.clone(), ns)
        .patch_scale(
            name,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"replicas": replicas}})),
        )
        .await
        .map(|_| ())
        .map_err(|e| format!("scaling {ns}/{name}: {e}"))
}

/// Deletes Deployment `ns/name` without waiting.
pub async fn delete_deployment(client: &Client, ns: &str, name: &str) {
    let _ = Api::<Deployment>::namespaced(client.clone(), ns)
        .delete(name, &DeleteParams::default())
        .await;
}

/// KEDA's ScaledObject kind.
fn scaled_object_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("keda.sh", "v1alpha1", "ScaledObject"),
        "scaledobjects",
    )
}

/// ScaledObjects of namespace `ns`.
pub fn scaled_objects(client: &Client, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), ns, &scaled_object_resource())
}

/// Lists the ScaledObjects of every namespace (the CRD is served).
pub async fn scaled_objects_all(client: &Client) -> Result<(), kube::Error> {
    Api::<DynamicObject>::all_with(client.clone(), &scaled_object_resource())
        .list(&ListParams::default())
        .await
        .map(|_| ())
}

/// The status of condition `kind` of ScaledObject `ns/name` (`True`, `False`, `Unknown`), or
/// an empty string when it has none.
pub async fn condition(client: &Client, ns: &str, name: &str, kind: &str) -> String {
    let Ok(object) = scaled_objects(client, ns).get(name).await else {
        return String::new();
    };
    object.data["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == kind)
        .and_then(|c| c["status"].as_str())
        .unwrap_or_default()
        .to_owned()
}

/// Whether ScaledObject `ns/name` is Ready.
pub async fn ready(client: &Client, ns: &str, name: &str) -> bool {
    condition(client, ns, name, "Ready").await == "True"
}

/// Waits up to `limit` for ScaledObject `ns/name` to be Ready; whether it was.
pub async fn wait_ready(client: &Client, ns: &str, name: &str, limit: Duration) -> bool {
    wait_until(limit, || ready(client, ns, name)).await
}

/// Deletes ScaledObject `ns/name` (absent is fine); with `wait`, up to a minute until it is gone
/// (KEDA's finalizer removes its HPA first).
pub async fn delete_scaled_object(client: &Client, ns: &str, name: &str, wait: bool) {
    let api = scaled_objects(client, ns);
    let _ = api.delete(name, &DeleteParams::default()).await;
    if wait {
        wait_until(Duration::from_secs(60), || async {
            matches!(api.get(name).await, Err(ref e) if not_found(e))
        })
        .await;
    }
}

/// Merges `patch` into ScaledObject `ns/name`.
pub async fn patch_scaled_object(
    client: &Client,
    ns: &str,
    name: &str,
    patch: serde_json::Value,
) -> Result<(), String> {
    scaled_objects(client, ns)
        .patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .map(|_| ())
        .map_err(|e| format!("patching ScaledObject {ns}/{name}: {e}"))
}

/// The pods labelled `selector` in `ns` that are not being deleted, by name.
pub async fn pods(client: &Client, ns: &str, selector: &str) -> Vec<String> {
    let list = Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(selector))
        .await;
    let mut names: Vec<String> = list
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| p.metadata.name)
        .collect();
    names.sort();
    names
}

/// How many pods are labelled `selector` in `ns`, those being deleted included.
pub async fn pod_count(client: &Client, ns: &str, selector: &str) -> usize {
    Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(selector))
        .await
        .map(|l| l.items.len())
        .unwrap_or(0)
}

/// Plays the kubelet's part for pod `ns/name`: through the status subresource, phase Running,
/// `ip` as its address and a Ready condition.
pub async fn play_kubelet(client: &Client, ns: &str, name: &str, ip: &str) -> Result<(), String> {
    pod_status(&Api::namespaced(client.clone(), ns), name, ip, true)
        .await
        .map_err(|e| format!("pod {ns}/{name}'s status: {e}"))
}

/// Reports pod `name` Running at `ip`, Ready or not, through the status subresource (the
/// kubelet's part).
pub async fn pod_status(pods: &Api<Pod>, name: &str, ip: &str, ready: bool) -> Result<(), String> {
    let now = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    let status = serde_json::json!({"status": {
        "phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}],
        "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" },
                        "lastTransitionTime": now}]
    }});
    pods.patch_status(name, &PatchParams::default(), &Patch::Merge(status))
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Pod `ns/name`'s deletion-cost annotation, or "-" when it has none.
pub async fn cost_of(client: &Client, ns: &str, name: &str) -> String {
    Api::<Pod>::namespaced(client.clone(), ns)
        .get(name)
        .await
        .ok()
        .and_then(|p| p.metadata.annotations?.get(DELETION_COST).cloned())
        .unwrap_or_else(|| "-".into())
}

/// Pod `ns/name`'s IP address, empty when it has none.
pub async fn pod_ip(client: &Client, ns: &str, name: &str) -> String {
    Api::<Pod>::namespaced(client.clone(), ns)
        .get(name)
        .await
        .ok()
        .and_then(|p| p.status?.pod_ip)
        .unwrap_or_default()
}
