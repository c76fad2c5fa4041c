//! The suite's certificates (rcgen): one CA for the engine (the API server's front proxy, KEDA's
//! operator and metrics adapter, the adapter's serving certificate), one for wool-scaler's TLS
//! with KEDA, and the API server's service-account key pair.

use std::path::{Path, PathBuf};

use rcgen::KeyPair;

use crate::common;

/// A certificate and its key, as PEM files.
#[derive(Debug, Clone)]
pub struct Pair {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// Every file the engine and the TLS case use, under `<temp dir>/pki`.
#[derive(Debug, Clone)]
pub struct Pki {
    pub engine_ca: PathBuf,
    /// The API server's client certificate towards aggregated API servers (CN front-proxy).
    pub front_proxy: Pair,
    pub scaler_ca: PathBuf,
    /// wool-scaler's serving certificate.
    pub scaler: Pair,
    /// KEDA's client certificate towards wool-scaler (mutual TLS).
    pub keda_to_scaler: Pair,
    /// The service-account signing key and its public half.
    pub sa_key: PathBuf,
    pub sa_pub: PathBuf,
    /// KEDA's `--cert-dir` (the operator's and metrics adapter's gRPC between them, the
    /// adapter's serving): ca.crt, tls.crt, tls.key.
    pub keda_cert_dir: PathBuf,
}

fn write(path: &Path, text: &str) -> Result<(), String> {
    std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))
}

impl From<common::Leaf> for Pair {
    fn from(leaf: common::Leaf) -> Self {
        Pair {
            cert: leaf.cert_path,
            key: leaf.key_path,
        }
    }
}

impl Pki {
    /// Makes everything under `dir`; `aggregation_ip` (the veth address the metrics adapter
    /// serves on, when there is one) goes into KEDA's certificate.
    pub fn generate(dir: &Path, aggregation_ip: Option<&str>) -> Result<Self, String> {
        let pki = dir.join("pki");
        std::fs::create_dir_all(&pki).map_err(|e| e.to_string())?;
        let engine = common::new_ca("engine-ca");
        let scaler = common::new_ca("scaler-ca");
        let engine_ca = pki.join("engine-ca.crt");
        let scaler_ca = pki.join("scaler-ca.crt");
        write(&engine_ca, &engine.pem())?;
        write(&scaler_ca, &scaler.pem())?;
        let mut keda_names = vec![
            "localhost",
            "keda-operator.keda.svc",
            "keda-metrics-apiserver.keda.svc",
            "127.0.0.1",
        ];
        keda_names.extend(aggregation_ip);
        let keda: Pair = common::new_named_leaf(&engine, &pki, "keda", "keda", &keda_names)?.into();
        let front_proxy: Pair = common::new_named_leaf(
            &engine,
            &pki,
            "front-proxy",
            "front-proxy",
            &["front-proxy"],
        )?
        .into();
        let scaler_leaf: Pair = common::new_named_leaf(
            &scaler,
            &pki,
            "wool-scaler",
            "wool-scaler",
            &["localhost", "wool-scaler.default.svc", "127.0.0.1"],
        )?
        .into();
        let keda_to_scaler: Pair = common::new_named_leaf(
            &scaler,
            &pki,
            "keda-to-scaler",
            "keda-operator",
            &["keda-operator"],
        )?
        .into();
        let sa = KeyPair::generate().map_err(|e| e.to_string())?;
        let sa_key = pki.join("sa.key");
        let sa_pub = pki.join("sa.pub");
        write(&sa_key, &sa.serialize_pem())?;
        write(&sa_pub, &sa.public_key_pem())?;
        let keda_cert_dir = dir.join("keda-certs");
        std::fs::create_dir_all(&keda_cert_dir).map_err(|e| e.to_string())?;
        for (from, to) in [
            (&engine_ca, "ca.crt"),
            (&keda.cert, "tls.crt"),
            (&keda.key, "tls.key"),
        ] {
            std::fs::copy(from, keda_cert_dir.join(to)).map_err(|e| e.to_string())?;
        }
        Ok(Self {
            engine_ca,
            front_proxy,
            scaler_ca,
            scaler: scaler_leaf,
            keda_to_scaler,
            sa_key,
            sa_pub,
            keda_cert_dir,
        })
    }
}
