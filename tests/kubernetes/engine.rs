//! The engine: etcd, kube-apiserver, KEDA's CRDs and operator and, when a case of the run needs
//! them, the HPA parts (KEDA's metrics adapter as the external.metrics.k8s.io APIService, and
//! kube-controller-manager's HPA controller, with its Deployment and ReplicaSet controllers for
//! the pods cases). Started once per run by the first case that needs it, with every part any
//! selected case needs; stopped by [`shutdown`] at the end of the run, whatever happened.

use std::path::PathBuf;
use std::process::Command;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
use kube::Api;

use crate::api::{self, wait_until};
use crate::chart;
use crate::pki::Pki;
use crate::processes::{self, free_port, Process};
use crate::setup::Setup;

/// What of the engine a case needs beyond the API server.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Parts {
    /// KEDA's operator (it calls the scalers and writes `spec.replicas`).
    pub keda: bool,
    /// KEDA's metrics adapter and the HPA controller: the scale above 1 (needs the network
    /// namespace: the adapter's Endpoints may not be loopback).
    pub hpa: bool,
    /// The Deployment and ReplicaSet controllers: pods made and deleted.
    pub pod_controllers: bool,
}

impl Parts {
    pub const API_SERVER: Parts = Parts {
        keda: false,
        hpa: false,
        pod_controllers: false,
    };
    pub const KEDA: Parts = Parts {
        keda: true,
        ..Parts::API_SERVER
    };
    pub const HPA: Parts = Parts {
        hpa: true,
        ..Parts::KEDA
    };
    pub const PODS: Parts = Parts {
        pod_controllers: true,
        ..Parts::HPA
    };

    /// Whether these parts include every one of `needed`.
    pub fn covers(self, needed: Parts) -> bool {
        self.union(needed) == self
    }

    pub fn union(self, other: Parts) -> Parts {
        Parts {
            keda: self.keda || other.keda,
            hpa: self.hpa || other.hpa,
            pod_controllers: self.pod_controllers || other.pod_controllers,
        }
    }
}

/// The running engine.
pub struct Engine {
    pub setup: Setup,
    /// The run's temporary folder (logs, PKI, kubeconfigs, etcd's data).
    pub tmp: PathBuf,
    pub pki: Pki,
    /// The admin's kubeconfig (the scalers use it for their pods fleets, as in a cluster their
    /// ServiceAccount would).
    pub kubeconfig: PathBuf,
    pub api_port: u16,
    pub client: kube::Client,
    /// The veth address inside the suite's network namespace, when it runs in one.
    pub aggregation_ip: Option<String>,
    /// KEDA's operator's gRPC metrics service (the adapter's source).
    keda_grpc_port: u16,
    /// The parts started.
    pub parts: Parts,
}

/// The parts the selected cases need, set by `main` before the run.
static WANTED: OnceLock<Parts> = OnceLock::new();
static ENGINE: OnceLock<Result<Engine, String>> = OnceLock::new();
/// The temporary folder, for the stop (also when the start failed half-way).
static TMP: Mutex<Option<PathBuf>> = Mutex::new(None);

/// Says which parts the run's cases need (before the first case starts).
pub fn want(parts: Parts) {
    let _ = WANTED.set(parts);
}

/// The engine, started on first use with every part the run's cases need.
pub fn ensure(setup: &Setup) -> Result<&'static Engine, String> {
    ENGINE
        .get_or_init(|| {
            let parts = WANTED.get().copied().unwrap_or(Parts::PODS);
            crate::runtime()
                .block_on(Engine::start(setup.clone(), parts))
                .map_err(|e| format!("the engine did not start: {e}"))
        })
        .as_ref()
        .map_err(Clone::clone)
}

fn say(text: &str) {
    eprintln!("{}  e2e  {text}", crate::clock());
}

/// Starts `program` as process `name`.
fn run(
    name: &str,
    program: PathBuf,
    args: &[String],
    env: &[(&str, &str)],
) -> Result<Process, String> {
    let mut command = Command::new(program);
    command.args(args).envs(env.iter().copied());
    processes::start(name, &mut command)
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|a| a.to_string()).collect()
}

impl Engine {
    async fn start(setup: Setup, parts: Parts) -> Result<Engine, String> {
        let tmp = std::env::temp_dir().join(format!(
            "wool-e2e.{}",
            uuid::Uuid::new_v4().simple().to_string().split_at(8).0
        ));
        std::fs::create_dir_all(tmp.join("logs")).map_err(|e| e.to_string())?;
        *TMP.lock().unwrap() = Some(tmp.clone());
        processes::set_log_dir(&tmp.join("logs"));
        say(&format!("temp dir {}", tmp.display()));
        let aggregation_ip = std::env::var("WOOL_E2E_AGG_IP")
            .ok()
            .filter(|s| !s.is_empty());
        let pki = Pki::generate(&tmp, aggregation_ip.as_deref())?;
        let (api_port, kubeconfig) = control_plane(&setup, &tmp, &pki)?;
        let client = api::client(&kubeconfig).await?;
        let ready = wait_until(Duration::from_secs(120), || async {
            api::readyz(&client).await
        })
        .await;
        if !ready {
            return Err("the API server's /readyz did not answer ok within 120 s".into());
        }
        say(&format!("API server ready on 127.0.0.1:{api_port}"));
        let mut engine = Engine {
            setup,
            tmp,
            pki,
            kubeconfig,
            api_port,
            client,
            aggregation_ip,
            keda_grpc_port: free_port(),
            parts: Parts::API_SERVER,
        };
        engine.crds().await?;
        if parts.keda {
            engine.keda_operator().await?;
            engine.parts.keda = true;
        }
        if parts.hpa {
            engine.hpa_parts(parts.pod_controllers).await?;
            engine.parts.hpa = true;
            engine.parts.pod_controllers = parts.pod_controllers;
        }
        Ok(engine)
    }

    /// The namespace `keda` and KEDA's CRDs, applied server-side; waits until ScaledObjects
    /// can be listed.
    async fn crds(&self) -> Result<(), String> {
        api::ensure_namespace(&self.client, "keda").await?;
        let mut files: Vec<PathBuf> = std::fs::read_dir(self.setup.crds())
            .map_err(|e| format!("{}: {e}", self.setup.crds().display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
            .collect();
        files.sort();
        for file in files {
            let yaml = std::fs::read_to_string(&file).map_err(|e| e.to_string())?;
            chart::apply(&self.client, "default", &yaml)
                .await
                .map_err(|e| format!("{}: {e}", file.display()))?;
        }
        let listed = wait_until(Duration::from_secs(60), || async {
            api::scaled_objects_all(&self.client).await.is_ok()
        })
        .await;
        if !listed {
            return Err("KEDA's CRDs: ScaledObjects could not be listed within 60 s".into());
        }
        Ok(())
    }

    async fn keda_operator(&self) -> Result<(), String> {
        let kubeconfig = self.kubeconfig.display().to_string();
        let process = run(
            "keda-operator",
            self.setup.bin("keda-operator"),
            &[
                "--kubeconfig".into(),
                kubeconfig,
                "--cert-dir".into(),
                self.pki.keda_cert_dir.display().to_string(),
                "--metrics-bind-address".into(),
                format!("127.0.0.1:{}", free_port()),
                "--health-probe-bind-address".into(),
                format!("127.0.0.1:{}", free_port()),
                "--metrics-service-bind-address".into(),
                format!("127.0.0.1:{}", self.keda_grpc_port),
                "--enable-webhook-patching=false".into(),
                "--enable-apiservice-patching=false".into(),
                "--zap-log-level=info".into(),
            ],
            &[
                ("POD_NAMESPACE", "keda"),
                ("KEDA_CLUSTER_OBJECT_NAMESPACE", "keda"),
                ("OPERATOR_NAME", "keda-operator"),
                ("WATCH_NAMESPACE", ""),
            ],
        )?;
        let up = wait_until(Duration::from_secs(90), || async {
            processes::logged(&[&process.log, &process.out], &["Starting workers"])
        })
        .await;
        if !up {
            return Err("KEDA's operator did not log 'Starting workers' within 90 s".into());
        }
        say(&format!(
            "KEDA operator running (metrics service 127.0.0.1:{})",
            self.keda_grpc_port
        ));
        Ok(())
    }

    /// KEDA's metrics adapter as the external.metrics.k8s.io APIService (on the veth address:
    /// Endpoints may not be loopback) and kube-controller-manager's HPA controller; with
    /// `pod_controllers`, its Deployment and ReplicaSet controllers too (they make and delete
    /// pods; no kubelet runs, so the pods cases play its part for the pods' status).
    async fn hpa_parts(&self, pod_controllers: bool) -> Result<(), String> {
        let ip = self.aggregation_ip.clone().ok_or(
            "the HPA parts need the suite's network namespace (its veth address)".to_string(),
        )?;
        let port = free_port();
        let kubeconfig = self.kubeconfig.display().to_string();
        let certs = &self.pki.keda_cert_dir;
        run(
            "keda-adapter",
            self.setup.bin("keda-adapter"),
            &[
                "--kubeconfig".into(),
                kubeconfig.clone(),
                "--lister-kubeconfig".into(),
                kubeconfig.clone(),
                "--authentication-kubeconfig".into(),
                kubeconfig.clone(),
                "--authorization-kubeconfig".into(),
                kubeconfig.clone(),
                "--secure-port".into(),
                port.to_string(),
                "--bind-address".into(),
                ip.clone(),
                "--cert-dir".into(),
                certs.display().to_string(),
                "--tls-cert-file".into(),
                certs.join("tls.crt").display().to_string(),
                "--tls-private-key-file".into(),
                certs.join("tls.key").display().to_string(),
                "--metrics-service-address".into(),
                format!("127.0.0.1:{}", self.keda_grpc_port),
                "--port".into(),
                free_port().to_string(),
                "--profiling-bind-address".into(),
                String::new(),
                "--metrics-service-grpc-authority".into(),
                "localhost".into(),
            ],
            &[
                ("POD_NAMESPACE", "keda"),
                ("KEDA_CLUSTER_OBJECT_NAMESPACE", "keda"),
                ("WATCH_NAMESPACE", ""),
            ],
        )?;
        let ca = base64_of(&std::fs::read(&self.pki.engine_ca).map_err(|e| e.to_string())?);
        let service = format!(
            r#"apiVersion: v1
kind: Service
metadata: {{name: keda-metrics-apiserver, namespace: keda}}
spec: {{ports: [{{name: https, port: 443, targetPort: {port}}}]}}
---
apiVersion: v1
kind: Endpoints
metadata: {{name: keda-metrics-apiserver, namespace: keda}}
subsets: [{{addresses: [{{ip: "{ip}"}}], ports: [{{name: https, port: {port}}}]}}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {{name: keda-metrics-apiserver-1, namespace: keda, labels: {{kubernetes.io/service-name: keda-metrics-apiserver}}}}
addressType: IPv4
endpoints: [{{addresses: ["{ip}"], conditions: {{ready: true}}}}]
ports: [{{name: https, port: {port}}}]
---
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {{name: v1beta1.external.metrics.k8s.io}}
spec:
  service: {{name: keda-metrics-apiserver, namespace: keda, port: 443}}
  group: external.metrics.k8s.io
  version: v1beta1
  caBundle: {ca}
  groupPriorityMinimum: 100
  versionPriority: 100
"#
        );
        chart::apply(&self.client, "keda", &service).await?;
        let apiservices: Api<APIService> = Api::all(self.client.clone());
        let name = "v1beta1.external.metrics.k8s.io";
        let available = wait_until(Duration::from_secs(90), || async {
            apiservices.get(name).await.ok().is_some_and(|s| {
                s.status
                    .and_then(|s| s.conditions)
                    .unwrap_or_default()
                    .iter()
                    .any(|c| c.type_ == "Available" && c.status == "True")
            })
        })
        .await;
        if !available {
            let conditions = apiservices
                .get(name)
                .await
                .ok()
                .and_then(|s| s.status)
                .and_then(|s| s.conditions);
            return Err(format!(
                "the metrics adapter's APIService {name} never became Available within 90 s: {conditions:?}"
            ));
        }
        say(&format!(
            "KEDA metrics adapter on {ip}:{port}, APIService {name} Available"
        ));
        let mut controllers = "horizontal-pod-autoscaler-controller".to_string();
        if pod_controllers {
            controllers.push_str(",deployment-controller,replicaset-controller");
        }
        let kcm = run(
            "kube-controller-manager",
            self.setup.bin("kube-controller-manager"),
            &[
                "--kubeconfig".into(),
                kubeconfig.clone(),
                "--authentication-kubeconfig".into(),
                kubeconfig.clone(),
                "--authorization-kubeconfig".into(),
                kubeconfig,
                "--bind-address".into(),
                "127.0.0.1".into(),
                "--secure-port".into(),
                free_port().to_string(),
                "--leader-elect=false".into(),
                "--controllers".into(),
                controllers,
                "--horizontal-pod-autoscaler-sync-period".into(),
                format!("{}s", HPA_SYNC_SECONDS),
                "--cert-dir".into(),
                self.tmp.join("kcm-certs").display().to_string(),
            ],
            &[],
        )?;
        let up = wait_until(Duration::from_secs(60), || async {
            processes::logged(&[&kcm.log, &kcm.out], &["Starting HPA controller"])
        })
        .await;
        if !up {
            return Err(
                "kube-controller-manager did not log 'Starting HPA controller' within 60 s".into(),
            );
        }
        Ok(())
    }
}

/// The HPA controller's sync period, in seconds.
pub const HPA_SYNC_SECONDS: u64 = 2;

/// etcd and kube-apiserver on free loopback ports; the API server's port and the admin's
/// kubeconfig (a token of system:masters).
fn control_plane(
    setup: &Setup,
    tmp: &std::path::Path,
    pki: &Pki,
) -> Result<(u16, PathBuf), String> {
    let (etcd_port, peer_port) = (free_port(), free_port());
    let client_url = format!("http://127.0.0.1:{etcd_port}");
    let peer_url = format!("http://127.0.0.1:{peer_port}");
    run(
        "etcd",
        setup.bin("etcd"),
        &[
            "--name".into(),
            "e2e".into(),
            "--data-dir".into(),
            tmp.join("etcd").display().to_string(),
            "--listen-client-urls".into(),
            client_url.clone(),
            "--advertise-client-urls".into(),
            client_url.clone(),
            "--listen-peer-urls".into(),
            peer_url.clone(),
            "--initial-advertise-peer-urls".into(),
            peer_url.clone(),
            "--initial-cluster".into(),
            format!("e2e={peer_url}"),
            "--listen-metrics-urls".into(),
            format!("http://127.0.0.1:{}", free_port()),
        ],
        &[],
    )?;
    let token = uuid::Uuid::new_v4().simple().to_string();
    let tokens = tmp.join("tokens.csv");
    std::fs::write(&tokens, format!("{token},admin,admin,system:masters\n"))
        .map_err(|e| e.to_string())?;
    let api_port = free_port();
    let file = |p: &PathBuf| p.display().to_string();
    let mut args = vec![
        format!("--etcd-servers={client_url}"),
        "--bind-address=127.0.0.1".into(),
        "--advertise-address=127.0.0.1".into(),
        format!("--secure-port={api_port}"),
        format!("--cert-dir={}", tmp.join("apiserver-certs").display()),
        format!("--token-auth-file={}", tokens.display()),
        "--authorization-mode=RBAC".into(),
        format!("--service-account-key-file={}", file(&pki.sa_pub)),
        format!("--service-account-signing-key-file={}", file(&pki.sa_key)),
        "--service-account-issuer=https://kubernetes.default.svc".into(),
        "--service-cluster-ip-range=10.96.0.0/24".into(),
    ];
    // The aggregation layer: the API server proxies to KEDA's metrics adapter as front-proxy.
    args.extend(strings(&[
        "--requestheader-allowed-names=front-proxy",
        "--requestheader-username-headers=X-Remote-User",
        "--requestheader-group-headers=X-Remote-Group",
        "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        "--enable-aggregator-routing=true",
    ]));
    args.push(format!(
        "--requestheader-client-ca-file={}",
        file(&pki.engine_ca)
    ));
    args.push(format!(
        "--proxy-client-cert-file={}",
        file(&pki.front_proxy.cert)
    ));
    args.push(format!(
        "--proxy-client-key-file={}",
        file(&pki.front_proxy.key)
    ));
    run("kube-apiserver", setup.bin("kube-apiserver"), &args, &[])?;
    let kubeconfig = tmp.join("admin.kubeconfig");
    std::fs::write(
        &kubeconfig,
        kubeconfig_text(api_port, "admin", &token, None),
    )
    .map_err(|e| e.to_string())?;
    Ok((api_port, kubeconfig))
}

/// A kubeconfig for the API server on `port` (its serving certificate is self-made: not
/// verified), as `user` with `token`, in `namespace` when given.
pub fn kubeconfig_text(port: u16, user: &str, token: &str, namespace: Option<&str>) -> String {
    let namespace = namespace
        .map(|ns| format!(", namespace: {ns}"))
        .unwrap_or_default();
    format!(
        "apiVersion: v1\nkind: Config\n\
         clusters: [{{name: e2e, cluster: {{server: \"https://127.0.0.1:{port}\", insecure-skip-tls-verify: true}}}}]\n\
         users: [{{name: {user}, user: {{token: \"{token}\"}}}}]\n\
         contexts: [{{name: e2e, context: {{cluster: e2e, user: {user}{namespace}}}}}]\n\
         current-context: e2e\n"
    )
}

fn base64_of(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Stops every process the suite started (the last started first), checks none is left
/// listening, prints the logs' tails when the run failed and removes the temporary folder
/// (kept with `WOOL_E2E_KEEP=1`). Whether the stop was clean.
pub fn shutdown(run_failed: bool) -> bool {
    let started = processes::count();
    for line in processes::stop_all() {
        say(&line);
    }
    std::thread::sleep(Duration::from_millis(300));
    let own_namespace = std::env::var("WOOL_E2E_AGG_IP").is_ok_and(|ip| !ip.is_empty());
    let listening = processes::still_listening(own_namespace);
    let clean = listening.is_empty();
    if clean {
        say(&format!(
            "stopped {started} processes; none of them is listening"
        ));
    } else {
        say("FAIL: still listening after the stop:");
        for line in &listening {
            eprintln!("    {line}");
        }
    }
    let keep = std::env::var_os("WOOL_E2E_KEEP").is_some_and(|v| !v.is_empty());
    if (run_failed || !clean) && !keep {
        for file in processes::log_files() {
            eprintln!("--- tail of {}", file.display());
            eprintln!("{}", processes::tail(&file, 15));
        }
    }
    if let Some(tmp) = TMP.lock().unwrap().take() {
        if keep {
            say(&format!("kept {}", tmp.display()));
        } else {
            let _ = std::fs::remove_dir_all(&tmp);
        }
    }
    clean
}
