//! What the suite needs before a case can start, prepared by `scripts/e2e-kubernetes.sh` and
//! passed in the environment: the engine, Helm, the images' digests, the Wool venv and the
//! workspace's programs. A case without one fails at once, saying which and what provides it.

use std::path::PathBuf;

/// The paths and names every case uses.
#[derive(Debug, Clone)]
pub struct Setup {
    /// The repository.
    pub root: PathBuf,
    /// `scripts/ensure-engine.sh`'s folder: `bin/` (etcd, kube-apiserver, …) and `crds/`.
    pub engine: PathBuf,
    /// The Helm binary of `scripts/ensure-helm.sh`.
    pub helm: PathBuf,
    /// The images `scripts/images.sh` built, by digest (`sha256:…`).
    pub worker_digest: String,
    pub scaler_digest: String,
    /// The Wool 0.15.7 venv's Python (`scripts/setup-venvs.sh`).
    pub python: PathBuf,
    pub wool_worker: PathBuf,
    pub wool_scaler: PathBuf,
    /// `cargo build --example burst`: dispatches sleep tasks to a worker.
    pub burst: PathBuf,
}

/// The glue that provides everything at once.
const GLUE: &str = "./scripts/e2e-kubernetes.sh";

/// A precondition that is not met: what is missing and the command that provides it.
fn missing(what: &str, provides: &str) -> String {
    format!("precondition not met: {what}; `{provides}` provides it (or run {GLUE}, which prepares everything)")
}

fn from_env(name: &str, provides: &str) -> Result<String, String> {
    match std::env::var(name) {
        Ok(value) if !value.is_empty() => Ok(value),
        _ => Err(missing(&format!("{name} is not set"), provides)),
    }
}

fn file(path: PathBuf, what: &str, provides: &str) -> Result<PathBuf, String> {
    if path.is_file() {
        Ok(path)
    } else {
        Err(missing(
            &format!("{what} ({}) is missing", path.display()),
            provides,
        ))
    }
}

/// The folder the workspace's programs were built into (`target/debug`), beside this test's
/// `deps/`.
fn profile_dir() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.parent()?.to_path_buf()))
        .unwrap_or_else(|| PathBuf::from("target/debug"))
}

impl Setup {
    /// Reads and checks the environment; the first precondition not met, as a message.
    pub fn from_env() -> Result<Self, String> {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let engine = PathBuf::from(from_env(
            "WOOL_E2E_ENGINE",
            "export WOOL_E2E_ENGINE=$(./scripts/ensure-engine.sh)",
        )?);
        for tool in [
            "etcd",
            "kube-apiserver",
            "kube-controller-manager",
            "keda-operator",
            "keda-adapter",
        ] {
            file(
                engine.join("bin").join(tool),
                tool,
                "./scripts/ensure-engine.sh",
            )?;
        }
        let helm = file(
            PathBuf::from(from_env(
                "WOOL_E2E_HELM",
                "export WOOL_E2E_HELM=$(./scripts/ensure-helm.sh)",
            )?),
            "helm",
            "./scripts/ensure-helm.sh",
        )?;
        let worker_digest = from_env(
            "WOOL_E2E_WORKER_DIGEST",
            "./scripts/images.sh; export WOOL_E2E_WORKER_DIGEST=$(cat dist/wool-worker-*.digest)",
        )?;
        let scaler_digest = from_env(
            "WOOL_E2E_SCALER_DIGEST",
            "./scripts/images.sh; export WOOL_E2E_SCALER_DIGEST=$(cat dist/wool-scaler-*.digest)",
        )?;
        let python = file(
            root.join("target/venvs/wool-0.15.7/bin/python"),
            "the Wool 0.15.7 venv",
            "./scripts/setup-venvs.sh",
        )?;
        let build = "cargo build --workspace --bins --example burst";
        let profile = profile_dir();
        Ok(Self {
            wool_worker: file(profile.join("wool-worker"), "wool-worker", build)?,
            wool_scaler: file(profile.join("wool-scaler"), "wool-scaler", build)?,
            burst: file(profile.join("examples/burst"), "the burst example", build)?,
            root,
            engine,
            helm,
            worker_digest,
            scaler_digest,
            python,
        })
    }

    /// One of the engine's programs.
    pub fn bin(&self, name: &str) -> PathBuf {
        self.engine.join("bin").join(name)
    }

    /// A file of the repository.
    pub fn repo(&self, path: &str) -> PathBuf {
        self.root.join(path)
    }

    /// The chart.
    pub fn chart(&self) -> PathBuf {
        self.repo("charts/wool-scaler")
    }

    /// The values every case's workers and ScaledObject are rendered with.
    pub fn e2e_values(&self) -> PathBuf {
        self.repo("tests/helm/e2e-values.yaml")
    }

    /// KEDA's CRDs.
    pub fn crds(&self) -> PathBuf {
        self.engine.join("crds")
    }
}
