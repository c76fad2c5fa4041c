//! Shared test fixtures: throwaway PKI (rcgen) and real `wool-worker` processes.
#![allow(dead_code)]

pub mod hostile;
pub mod netns;
pub mod python_peer;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};

/// A certificate and its private key, as PEM, and where they were written.
#[derive(Debug, Clone)]
pub struct Leaf {
    pub cert_pem: String,
    pub key_pem: String,
    pub cert_path: PathBuf,
    pub key_path: PathBuf,
}

/// Throwaway PKI in a temporary directory (removed on drop): a CA; a worker certificate valid
/// for server and client authentication with SANs `127.0.0.1` and `localhost`; an unrelated
/// second CA with its own leaf of the same shape.
pub struct Pki {
    pub dir: tempfile::TempDir,
    pub ca_pem: String,
    pub ca_path: PathBuf,
    pub leaf: Leaf,
    /// A leaf of the same CA valid for [`NAMED_LEAF_IDENTITY`] only (no IP address): reached at
    /// 127.0.0.1, it verifies only against that identity.
    pub named_leaf: Leaf,
    pub other_ca_pem: String,
    pub other_ca_path: PathBuf,
    pub other_leaf: Leaf,
}

pub fn new_ca(name: &str) -> CertifiedIssuer<'static, KeyPair> {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap()
}

pub fn new_leaf(ca: &CertifiedIssuer<'static, KeyPair>, dir: &Path, stem: &str) -> Leaf {
    new_leaf_for(ca, dir, stem, &["127.0.0.1", "localhost"])
}

pub fn new_leaf_for(
    ca: &CertifiedIssuer<'static, KeyPair>,
    dir: &Path,
    stem: &str,
    names: &[&str],
) -> Leaf {
    new_named_leaf(ca, dir, stem, "wool-test-worker", names).unwrap()
}

/// A leaf of `ca` named `common_name`, valid for `names` (DNS names and IP addresses) for
/// server and client authentication, written to `dir` as `{stem}-cert.pem` and
/// `{stem}-key.pem`; `Err` says what failed.
pub fn new_named_leaf(
    ca: &CertifiedIssuer<'static, KeyPair>,
    dir: &Path,
    stem: &str,
    common_name: &str,
    names: &[&str],
) -> Result<Leaf, String> {
    let mut params =
        CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
            .map_err(|e| e.to_string())?;
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    params.use_authority_key_identifier_extension = true;
    let key = KeyPair::generate().map_err(|e| e.to_string())?;
    let cert = params.signed_by(&key, ca).map_err(|e| e.to_string())?;
    let leaf = Leaf {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
        cert_path: dir.join(format!("{stem}-cert.pem")),
        key_path: dir.join(format!("{stem}-key.pem")),
    };
    for (path, text) in [
        (&leaf.cert_path, &leaf.cert_pem),
        (&leaf.key_path, &leaf.key_pem),
    ] {
        std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(leaf)
}

/// A client's mutual-TLS credentials: trusting `ca_pem`, presenting `leaf`.
pub fn client_mutual(ca_pem: &str, leaf: &Leaf) -> libwool::WorkerCredentials {
    libwool::WorkerCredentials::from_pem(
        ca_pem.as_bytes(),
        Some(leaf.key_pem.as_bytes()),
        Some(leaf.cert_pem.as_bytes()),
        true,
        None,
    )
    .unwrap()
}

/// The only name [`Pki::named_leaf`] is valid for.
pub const NAMED_LEAF_IDENTITY: &str = "wool-pool.test";

impl Pki {
    pub fn generate() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let ca = new_ca("wool-test-ca");
        let other = new_ca("unrelated-ca");
        let ca_path = dir.path().join("ca.pem");
        let other_ca_path = dir.path().join("other-ca.pem");
        std::fs::write(&ca_path, ca.pem()).unwrap();
        std::fs::write(&other_ca_path, other.pem()).unwrap();
        let leaf = new_leaf(&ca, dir.path(), "worker");
        let named_leaf = new_leaf_for(&ca, dir.path(), "named", &[NAMED_LEAF_IDENTITY]);
        let other_leaf = new_leaf(&other, dir.path(), "other");
        Self {
            ca_pem: ca.pem(),
            ca_path,
            leaf,
            named_leaf,
            other_ca_pem: other.pem(),
            other_ca_path,
            other_leaf,
            dir,
        }
    }

    /// The worker's side of mutual TLS: its leaf, and this CA for client certificates.
    pub fn server_mutual(&self) -> libwool::worker::ServerCredentials {
        libwool::worker::ServerCredentials::mutual(
            self.ca_pem.clone(),
            self.leaf.cert_pem.clone(),
            self.leaf.key_pem.clone(),
        )
    }

    /// A client's mutual-TLS credentials: trusting `ca_pem`, presenting `leaf`.
    pub fn client_mutual(&self, ca_pem: &str, leaf: &Leaf) -> libwool::WorkerCredentials {
        client_mutual(ca_pem, leaf)
    }

    /// `wool-worker` flags for mutual TLS with this PKI.
    pub fn mutual_args(&self) -> Vec<String> {
        vec![
            "--tls-ca".into(),
            self.ca_path.display().to_string(),
            "--tls-cert".into(),
            self.leaf.cert_path.display().to_string(),
            "--tls-key".into(),
            self.leaf.key_path.display().to_string(),
        ]
    }

    /// `wool-worker` flags for one-way TLS with this PKI.
    pub fn one_way_args(&self) -> Vec<String> {
        let mut args = self.mutual_args();
        args.push("--one-way".into());
        args
    }
}

/// A running `wool-worker` process; killed on drop if still running.
pub struct WorkerProcess {
    pub child: Child,
    pub address: String,
    pub started: Instant,
}

/// The path of one of the workspace's programs (`wool-worker`, `woolctl`, `wool-scaler`): in the
/// target directory's profile folder, beside this test's `deps/`. Each program is its own
/// package, so cargo builds it for `cargo test --workspace` (or `cargo build --workspace`) but
/// gives this package no `CARGO_BIN_EXE_` for it.
///
/// Panics (failing the test with the command to run) when the program has not been built.
///
/// `WOOL_PROGRAM_DIR` names another folder to take the programs from: the sanitizer builds,
/// whose own target directories hold the instrumented tests but not the programs, use the
/// ordinary build's (a program is a separate process, so it need not be instrumented).
pub fn program(name: &str) -> PathBuf {
    let profile = match std::env::var_os("WOOL_PROGRAM_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => std::env::current_exe()
            .expect("the test's own path")
            .parent()
            .and_then(|deps| deps.parent())
            .expect("the test binary lives in <target>/<profile>/deps")
            .to_path_buf(),
    };
    let path = profile.join(name);
    assert!(
        path.is_file(),
        "{} is missing: run `cargo build --workspace` (or `cargo test --workspace`) first",
        path.display()
    );
    path
}

pub fn wool_worker_bin() -> PathBuf {
    program("wool-worker")
}

impl WorkerProcess {
    /// Starts `wool-worker` with `args` and reads its address from the first stdout line.
    pub fn spawn(args: &[String]) -> Self {
        // Only warnings: the workers' start and stop lines would drown the test output.
        Self::start(args, "warn", Stdio::inherit())
    }

    /// As [`spawn`](Self::spawn), logging at `level`; the lines the worker logs (stderr), as
    /// they come (also echoed to the test's stderr).
    pub fn spawn_logging(
        args: &[String],
        level: &str,
    ) -> (Self, std::sync::mpsc::Receiver<String>) {
        let mut worker = Self::start(args, level, Stdio::piped());
        let log = log_lines(&mut worker.child, "");
        (worker, log)
    }

    fn start(args: &[String], log_level: &str, stderr: Stdio) -> Self {
        let started = Instant::now();
        let mut child = Command::new(wool_worker_bin())
            .args(args)
            .env("RUST_LOG", log_level)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("spawn wool-worker");
        let address = printed_address(&mut child, "wool-worker");
        Self {
            child,
            address,
            started,
        }
    }

    pub fn plaintext() -> Self {
        Self::spawn(&[])
    }

    /// Waits up to `limit` for the process to exit; its exit code, or `None` if still running.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<i32> {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status.code().unwrap_or(-1));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        None
    }

    pub fn is_running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Freezes the process (SIGSTOP): its sockets stay open, nothing answers.
    pub fn freeze(&self) {
        // SAFETY: signalling our own child.
        assert_eq!(unsafe { libc::kill(self.pid(), libc::SIGSTOP) }, 0);
    }

    /// Thaws a frozen process (SIGCONT).
    pub fn thaw(&self) {
        // SAFETY: signalling our own child.
        assert_eq!(unsafe { libc::kill(self.pid(), libc::SIGCONT) }, 0);
    }
}

impl Drop for WorkerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The address a server process (`wool-worker`, `wool-scaler`) printed as its first stdout line.
pub fn printed_address(child: &mut Child, program: &str) -> String {
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let address = line.trim().to_string();
    assert!(!address.is_empty(), "{program} printed no address");
    address
}

/// The lines `child` writes to its (piped) stderr, as they come; each also echoed to the test's
/// stderr after `prefix`.
pub fn log_lines(child: &mut Child, prefix: &'static str) -> std::sync::mpsc::Receiver<String> {
    let (lines, log) = std::sync::mpsc::channel();
    let stderr = BufReader::new(child.stderr.take().unwrap());
    std::thread::spawn(move || {
        for line in stderr.lines().map_while(Result::ok) {
            eprintln!("{prefix}{line}");
            let _ = lines.send(line);
        }
    });
    log
}

/// Waits up to `limit` for a line of `log` containing `want`; the line.
pub fn expect_log_line(
    log: &std::sync::mpsc::Receiver<String>,
    want: &str,
    limit: Duration,
) -> String {
    let deadline = Instant::now() + limit;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match log.recv_timeout(left) {
            Ok(line) if line.contains(want) => return line,
            Ok(_) => continue,
            Err(_) => panic!("no log line containing {want:?} within {limit:?}"),
        }
    }
}

/// Replaces the file at `path` with `contents` as rotations do: written beside it, then
/// renamed over it (readers see the old file or the new one, never half of one).
pub fn replace_file(path: &Path, contents: &str) {
    let staged = path.with_extension("staged");
    std::fs::write(&staged, contents).unwrap();
    std::fs::rename(&staged, path).unwrap();
}

/// The deadline each call of a burst of `calls` gets, derived from what the burst waits for:
/// `sample` calls of the same kind run at once here and now (so under a sanitizer, or on a busy
/// machine, they are as slow as the burst will be), their time scaled to the burst, times 4,
/// and never under 60 s. A burst's calls wait their turn on one connection, so a fixed deadline
/// would measure the machine, not the client. `call` makes one call with the deadline it is given
/// (`None` for the sample: it is bounded by 10 minutes instead).
pub async fn burst_deadline<F, Fut, T, E>(calls: usize, sample: usize, call: F) -> Duration
where
    F: Fn(Option<Duration>) -> Fut,
    Fut: std::future::Future<Output = Result<T, E>> + Send + 'static,
    T: Send + 'static,
    E: std::fmt::Display + Send + 'static,
{
    let begun = Instant::now();
    let sampled: Vec<_> = (0..sample).map(|_| tokio::spawn(call(None))).collect();
    for outcome in sampled {
        let finished = tokio::time::timeout(Duration::from_secs(600), outcome).await;
        if let Err(error) = finished
            .expect("a sample call ended within 10 minutes")
            .unwrap()
        {
            panic!("precondition not met: a sample call of the burst failed: {error}");
        }
    }
    let scaled = begun.elapsed().mul_f64(4.0 * calls as f64 / sample as f64);
    let deadline = scaled.max(Duration::from_secs(60));
    eprintln!(
        "{sample} sample calls took {:?}: each of {calls} gets {deadline:?}",
        begun.elapsed()
    );
    deadline
}

/// A two-thread tokio runtime for a test's async parts.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// A free TCP port on 127.0.0.1 with nothing listening on it (bound, then released).
pub fn unused_local_address() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap().to_string();
    drop(listener);
    address
}

/// One scrape of a metrics endpoint at `address` over plain HTTP/1.1: the exposition's samples
/// by name with their labels (`wool_scaler_active{scaledobject="default/w"}`), after checking
/// the status line and content type.
pub fn scrape(address: &str) -> std::collections::HashMap<String, f64> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    write!(
        stream,
        "GET /metrics HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: application/openmetrics-text"),
        "{head}"
    );
    assert!(body.trim_end().ends_with("# EOF"), "{body}");
    samples(body)
}

/// The samples of a metrics exposition (`WorkerHandle::metrics_text`, a scrape's body) by name
/// with their labels. Comment lines are skipped: a `# HELP` line's text may well read like a
/// sample (`# HELP wool_worker_stopping 1 once a stop has begun`).
pub fn samples(text: &str) -> std::collections::HashMap<String, f64> {
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .map(|line| {
            let (name, value) = line.rsplit_once(' ').unwrap();
            (name.to_owned(), value.parse::<f64>().unwrap())
        })
        .collect()
}

/// A worker that predates the `idle` RPC, as Wool 0.13.1's does: every RPC but `idle` behaves,
/// `idle` answers `UNIMPLEMENTED` ("Method not found!", grpcio's text). Serves on the current
/// runtime until the returned task is aborted; returns its address.
pub async fn serve_legacy_worker() -> (String, tokio::task::JoinHandle<()>) {
    serve_worker_double(None).await
}

/// A worker double answering `idle` with `reading` (`None`: `UNIMPLEMENTED`, as a worker that
/// predates the RPC), `stop` with success, and nothing else. Serves on the current runtime until
/// the returned task is aborted; returns its address.
pub async fn serve_worker_double(reading: Option<f64>) -> (String, tokio::task::JoinHandle<()>) {
    serve_idle_with(move || {
        Box::pin(
            async move { reading.ok_or_else(|| tonic::Status::unimplemented("Method not found!")) },
        )
    })
    .await
}

/// What a worker double's `idle` does: the reading, or the status to fail with.
pub type IdleAnswer =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<f64, tonic::Status>> + Send>>;

/// A worker double whose `idle` runs `idle()` (e.g. a future that never ends, to be cancelled);
/// `stop` succeeds, `dispatch` is UNIMPLEMENTED.
pub async fn serve_idle_with(
    idle: impl Fn() -> IdleAnswer + Send + Sync + 'static,
) -> (String, tokio::task::JoinHandle<()>) {
    use libwool::protocol::worker_server::{Worker, WorkerServer};
    use libwool::protocol::{Idle, Request, Response, StopRequest, Void};

    struct Double<F>(F);

    #[tonic::async_trait]
    impl<F: Fn() -> IdleAnswer + Send + Sync + 'static> Worker for Double<F> {
        type dispatchStream = tokio_stream::Empty<Result<Response, tonic::Status>>;

        async fn dispatch(
            &self,
            _: tonic::Request<tonic::Streaming<Request>>,
        ) -> Result<tonic::Response<Self::dispatchStream>, tonic::Status> {
            Err(tonic::Status::unimplemented(
                "dispatch is not part of this test double",
            ))
        }

        async fn stop(
            &self,
            _: tonic::Request<StopRequest>,
        ) -> Result<tonic::Response<Void>, tonic::Status> {
            Ok(tonic::Response::new(Void {}))
        }

        async fn idle(
            &self,
            _: tonic::Request<Void>,
        ) -> Result<tonic::Response<Idle>, tonic::Status> {
            let seconds = (self.0)().await?;
            Ok(tonic::Response::new(Idle { seconds }))
        }
    }

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
    let task = tokio::spawn(async move {
        let _ = tonic::transport::Server::builder()
            .add_service(WorkerServer::new(Double(idle)))
            .serve_with_incoming(incoming)
            .await;
    });
    (address, task)
}

/// A TCP state as `/proc/net/tcp` numbers it.
pub const TCP_ESTABLISHED: u8 = 0x01;
pub const TCP_CLOSE_WAIT: u8 = 0x08;
pub const TCP_LISTEN: u8 = 0x0A;

/// A TCP socket of this network namespace: one row of `/proc/net/tcp` or `/proc/net/tcp6`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpSocket {
    pub local_port: u16,
    /// 0 for a socket without a peer (a listening one).
    pub remote_port: u16,
    /// The state, as `/proc/net/tcp` numbers it (`TCP_ESTABLISHED`, `TCP_LISTEN`, ...).
    pub state: u8,
    pub inode: u64,
}

/// The TCP sockets (IPv4 and IPv6) of this network namespace, as the kernel lists them in
/// `/proc/net/tcp` and `/proc/net/tcp6`.
pub fn tcp_sockets() -> Vec<TcpSocket> {
    /// The port of an `ADDRESS:PORT` field, both in hexadecimal.
    fn port(address: &str) -> Option<u16> {
        u16::from_str_radix(address.rsplit(':').next()?, 16).ok()
    }
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|table| std::fs::read_to_string(table).ok())
        .flat_map(|table| {
            table
                .lines()
                .skip(1)
                .filter_map(|line| {
                    // sl, local address, remote address, state, ...; field 9: the inode
                    let fields: Vec<&str> = line.split_whitespace().collect();
                    Some(TcpSocket {
                        local_port: port(fields.get(1)?)?,
                        remote_port: port(fields.get(2)?)?,
                        state: u8::from_str_radix(fields.get(3)?, 16).ok()?,
                        inode: fields.get(9)?.parse().ok()?,
                    })
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The TCP sockets (IPv4 and IPv6) of this network namespace whose local port is `port`, as
/// (remote port, state): the worker side of each connection to a worker listening on `port`.
/// The kernel keeps these up to date even while the worker process is frozen, so they show
/// what a client did to its connection (a client that closed it leaves `TCP_CLOSE_WAIT`).
pub fn worker_side_sockets(port: u16) -> Vec<(u16, u8)> {
    tcp_sockets()
        .into_iter()
        .filter(|s| s.local_port == port && s.remote_port != 0)
        .map(|s| (s.remote_port, s.state))
        .collect()
}

/// The port of a `host:port` address.
pub fn port_of(address: &str) -> u16 {
    address.rsplit(':').next().unwrap().parse().unwrap()
}

/// The directory holding the `libwool.so` that cargo built for this test run (with the `capi`
/// feature, which the tests turn on).
pub fn library_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's own path");
    let deps = exe
        .parent()
        .expect("the test lives in target/<profile>/deps");
    for dir in [deps, deps.parent().unwrap_or(deps)] {
        if dir.join("libwool.so").is_file() {
            return dir.to_path_buf();
        }
    }
    panic!("no libwool.so next to {}", exe.display());
}

/// The repository's root.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The Python of the pinned Wool venv for `version`, creating the venvs on first use
/// (`scripts/setup-venvs.sh`: pip installs from PyPI, once; later runs find them ready).
pub fn wool_python(version: &str) -> PathBuf {
    static SETUP: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    let python = repo().join(format!("target/venvs/wool-{version}/bin/python"));
    SETUP.get_or_init(|| {
        let output = Command::new(repo().join("scripts/setup-venvs.sh"))
            .stdin(Stdio::null())
            .output()
            .expect("scripts/setup-venvs.sh runs");
        assert!(
            output.status.success(),
            "scripts/setup-venvs.sh failed (it needs python3 >= 3.11 and PyPI):\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
    });
    assert!(python.exists(), "{} is missing", python.display());
    python
}

/// A namespace no other test (or run) uses.
pub fn unique_namespace(what: &str) -> String {
    format!("{what}-{}", uuid::Uuid::new_v4().simple())
}

/// A real Wool `WorkerPool` published under a discovery namespace (`tests/interop/wool_pool.py
/// pool`), started and ready; SIGTERM and reaped on drop.
pub struct WoolPool {
    pub child: Child,
    lines: std::sync::mpsc::Receiver<String>,
}

impl WoolPool {
    /// `WorkerPool(spawn=spawn, discovery=LocalDiscovery(namespace))`, `extra` passed on
    /// (e.g. `--busy 30`); `netns` runs it inside that network namespace.
    pub fn start(namespace: &str, spawn: usize, extra: &[&str], netns: Option<&str>) -> Self {
        let mut child = pool_script(netns)
            .args(["pool", namespace, "--spawn", &spawn.to_string()])
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("the Wool pool script starts");
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut pool = Self { child, lines };
        pool.expect_line("ready", Duration::from_secs(60));
        pool
    }

    /// Waits for the pool to print `want` (a prefix); panics with what it printed otherwise.
    pub fn expect_line(&mut self, want: &str, limit: Duration) -> String {
        let deadline = Instant::now() + limit;
        let mut seen = Vec::new();
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match self.lines.recv_timeout(left) {
                Ok(line) if line.starts_with(want) => return line,
                Ok(line) => seen.push(line),
                Err(_) => break,
            }
        }
        panic!("the Wool pool never printed {want:?}; it printed {seen:?}");
    }

    /// Wool's own subscriber's listing of `namespace` (`wool_pool.py subscribe`), as JSON.
    pub fn wool_listing(
        namespace: &str,
        extra: &[&str],
        netns: Option<&str>,
    ) -> Vec<serde_json::Value> {
        let output = pool_script(netns)
            .args(["subscribe", namespace])
            .args(extra)
            .stdin(Stdio::null())
            .output()
            .expect("the Wool subscriber runs");
        let text = String::from_utf8_lossy(&output.stdout);
        assert!(
            text.trim_end().ends_with("done"),
            "Wool's subscriber: {text}"
        );
        text.lines()
            .filter(|l| l.starts_with('{'))
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

/// `tests/interop/wool_pool.py` under Wool 0.15.7's Python, inside `netns` when given.
fn pool_script(netns: Option<&str>) -> Command {
    let mut command = match netns {
        Some(ns) => {
            let mut command = Command::new("ip");
            command
                .args(["netns", "exec", ns])
                .arg(wool_python("0.15.7"));
            command
        }
        None => Command::new(wool_python("0.15.7")),
    };
    command.arg(repo().join("tests/interop/wool_pool.py"));
    command
}

impl Drop for WoolPool {
    fn drop(&mut self) {
        terminate(&mut self.child, Duration::from_secs(20));
    }
}

/// Ends a child process: SIGTERM, up to `grace` for it to exit, then SIGKILL; reaped either way.
pub fn terminate(child: &mut Child, grace: Duration) {
    if child.try_wait().ok().flatten().is_some() {
        return;
    }
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}
