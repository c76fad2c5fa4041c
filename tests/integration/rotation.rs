//! Rotating credentials while polls run: a CA and both sides' leaf certificates replaced
//! mid-run on a worker serving from files and a client reading reloadable credentials; the
//! worker's reload on file change and SIGHUP; bad new material refused; a CA rotated under
//! Wool 0.15.7's own client (a reloadable `WorkerCredentialsProvider`) polling our worker, and
//! under our reloadable client polling Wool's worker serving a reloadable provider.

use crate::common;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{
    client_mutual, expect_log_line, new_ca, new_leaf, new_leaf_for, port_of, replace_file,
    worker_side_sockets, Leaf, WorkerProcess, TCP_ESTABLISHED,
};
use libwool::connection::ChannelOptions;
use libwool::worker::{CredentialReload, RoutineRegistry, ServerCredentialFiles, Worker};
use libwool::{ErrorKind, WorkerConnection, WorkerCredentials};

/// One side's credential files (the CA it trusts, its certificate and key), in a directory of
/// their own.
struct Files {
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
}

impl Files {
    fn write(dir: &Path, ca_pem: &str, leaf: &Leaf) -> Self {
        std::fs::create_dir_all(dir).unwrap();
        let files = Self {
            ca: dir.join("ca.pem"),
            cert: dir.join("cert.pem"),
            key: dir.join("key.pem"),
        };
        std::fs::write(&files.ca, ca_pem).unwrap();
        std::fs::write(&files.cert, &leaf.cert_pem).unwrap();
        std::fs::write(&files.key, &leaf.key_pem).unwrap();
        files
    }

    fn rotate_leaf(&self, leaf: &Leaf) {
        replace_file(&self.cert, &leaf.cert_pem);
        replace_file(&self.key, &leaf.key_pem);
    }

    fn reloadable(&self) -> WorkerCredentials {
        WorkerCredentials::from_files_reloadable(
            &self.ca,
            Some(&self.key),
            Some(&self.cert),
            true,
            None,
        )
        .unwrap()
    }

    fn server(&self) -> ServerCredentialFiles {
        ServerCredentialFiles {
            cert: self.cert.clone(),
            key: self.key.clone(),
            client_ca: Some(self.ca.clone()),
        }
    }
}

/// A connection that shares no pooled channel with any other (its options are its own), so
/// its first call dials and handshakes anew.
fn fresh_connection(address: &str, credentials: WorkerCredentials) -> WorkerConnection {
    static UNIQUE: AtomicUsize = AtomicUsize::new(0);
    let mut options = ChannelOptions::default();
    options.max_receive_message_bytes -= 1 + UNIQUE.fetch_add(1, Ordering::Relaxed);
    WorkerConnection::with_options(address, Some(credentials), options).unwrap()
}

/// Polls `connection` every 10 ms until `stop`; (polls answered, failures with messages).
fn poll_until(
    connection: Arc<WorkerConnection>,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<(usize, Vec<String>)> {
    tokio::spawn(async move {
        let (mut answered, mut failures) = (0, Vec::new());
        while !stop.load(Ordering::Relaxed) {
            match connection.idle(Some(Duration::from_secs(5))).await {
                Ok(_) => answered += 1,
                Err(error) => failures.push(error.to_string()),
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        (answered, failures)
    })
}

/// ESTABLISHED connections the worker listening on `port` has now.
fn established(port: u16) -> usize {
    worker_side_sockets(port)
        .iter()
        .filter(|(_, state)| *state == TCP_ESTABLISHED)
        .count()
}

/// Given a worker serving mutual TLS from files and a client reading reloadable credentials,
/// when the CA is rotated (both trust old + new, then both leaves are replaced by the new CA's,
/// then the old CA is dropped), then not one poll fails, neither on the rotating client nor on
/// a connection made before the rotation with the old material (its TLS session carries on),
/// a task dispatched before the rotation finishes after it, the rotating client's superseded
/// channels close once they are unused, and the old CA is no longer accepted either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotating_the_ca_and_both_leaves_mid_run_fails_no_poll() {
    let dir = tempfile::tempdir().unwrap();
    let (old_ca, new_ca_issuer) = (new_ca("old-ca"), new_ca("new-ca"));
    let (old_ca_pem, new_ca_pem) = (old_ca.pem(), new_ca_issuer.pem());
    let both = format!("{old_ca_pem}{new_ca_pem}");
    let old_worker = new_leaf(&old_ca, dir.path(), "old-worker");
    let old_client = new_leaf(&old_ca, dir.path(), "old-client");
    let new_worker = new_leaf(&new_ca_issuer, dir.path(), "new-worker");
    let new_client = new_leaf(&new_ca_issuer, dir.path(), "new-client");
    let worker_files = Files::write(&dir.path().join("worker"), &old_ca_pem, &old_worker);
    let client_files = Files::write(&dir.path().join("client"), &old_ca_pem, &old_client);

    let worker = Worker::builder()
        .credentials_from_files(worker_files.server())
        .routines(RoutineRegistry::default().with_reference_routines())
        .serve()
        .await
        .unwrap();
    let address = worker.address().to_owned();
    let rotating = Arc::new(
        WorkerConnection::with_credentials(&address, Some(client_files.reloadable())).unwrap(),
    );
    let steady = Arc::new(fresh_connection(
        &address,
        client_mutual(&old_ca_pem, &old_client),
    ));
    steady.idle(Some(Duration::from_secs(5))).await.unwrap();
    let in_flight = {
        let steady = Arc::clone(&steady);
        tokio::spawn(async move {
            steady
                .dispatch("sleep", b"4.0".to_vec(), Some(Duration::from_secs(30)))
                .await
        })
    };
    let stop = Arc::new(AtomicBool::new(false));
    let pollers = [
        poll_until(Arc::clone(&rotating), Arc::clone(&stop)),
        poll_until(Arc::clone(&steady), Arc::clone(&stop)),
    ];
    let phase = Duration::from_millis(1300);
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Both sides trust both CAs.
    replace_file(&worker_files.ca, &both);
    replace_file(&client_files.ca, &both);
    tokio::time::sleep(phase).await;
    // Both leaves from the new CA.
    worker_files.rotate_leaf(&new_worker);
    client_files.rotate_leaf(&new_client);
    tokio::time::sleep(phase).await;
    // The old CA gone on both sides.
    replace_file(&worker_files.ca, &new_ca_pem);
    replace_file(&client_files.ca, &new_ca_pem);
    tokio::time::sleep(phase).await;
    stop.store(true, Ordering::Relaxed);
    for (poller, name) in pollers.into_iter().zip(["rotating", "steady"]) {
        let (answered, failures) = poller.await.unwrap();
        assert!(
            failures.is_empty(),
            "{name}: {} polls failed: {failures:?}",
            failures.len()
        );
        assert!(answered > 100, "{name}: only {answered} polls answered");
        eprintln!("{name}: {answered} polls answered, none failed");
    }
    assert_eq!(in_flight.await.unwrap().unwrap(), b"4.0");
    // The rotating client dialed anew for each change of its material; the connections made
    // with superseded material closed: the worker keeps the steady one and the current one.
    let port = port_of(&address);
    let deadline = Instant::now() + Duration::from_secs(30);
    while established(port) != 2 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(established(port), 2, "{:?}", worker_side_sockets(port));
    assert!(
        worker.accepted_connections() >= 4,
        "the rotating client never dialed anew"
    );
    // The worker no longer accepts a certificate of the old CA.
    let old_leaf_now = fresh_connection(&address, client_mutual(&both, &old_client));
    let refused = old_leaf_now
        .idle(Some(Duration::from_secs(5)))
        .await
        .unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::Handshake, "{refused}");
    // A client trusting only the old CA refuses the worker's new certificate.
    let old_trust = fresh_connection(&address, client_mutual(&old_ca_pem, &new_client));
    let refused = old_trust
        .idle(Some(Duration::from_secs(5)))
        .await
        .unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::Handshake, "{refused}");
    // New material, new connection: accepted.
    let new_now = fresh_connection(&address, client_mutual(&new_ca_pem, &new_client));
    new_now.idle(Some(Duration::from_secs(5))).await.unwrap();
}

/// Given a worker serving from files, when a file turns to garbage or the key stops matching
/// the certificate, then reload_credentials refuses it (the worker keeps serving its material
/// to new connections); good new material is taken, and reading unchanged files says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_refuses_bad_new_material_and_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let ca = new_ca("ca");
    let ca_pem = ca.pem();
    let first = new_leaf(&ca, dir.path(), "first");
    let renamed = new_leaf_for(&ca, dir.path(), "renamed", &["rotated.test"]);
    let other = new_leaf(&ca, dir.path(), "other");
    let client = new_leaf(&ca, dir.path(), "client");
    let files = Files::write(&dir.path().join("worker"), &ca_pem, &first);
    let worker = Worker::builder()
        .credentials_from_files(files.server())
        .serve()
        .await
        .unwrap();
    let address = worker.address().to_owned();
    let poll = |identity: Option<&str>| {
        let mut credentials = client_mutual(&ca_pem, &client);
        if let Some(identity) = identity {
            credentials = credentials.with_identity(identity).unwrap();
        }
        let connection = fresh_connection(&address, credentials);
        async move { connection.idle(Some(Duration::from_secs(5))).await }
    };
    poll(None).await.unwrap();
    assert_eq!(
        worker.reload_credentials().unwrap(),
        CredentialReload::Unchanged
    );

    replace_file(&files.key, "not a key\n");
    let refused = worker.reload_credentials().unwrap_err();
    assert!(refused.to_string().contains("private key"), "{refused}");
    poll(None).await.unwrap();
    replace_file(&files.key, &other.key_pem); // a key, but not the certificate's
    let refused = worker.reload_credentials().unwrap_err();
    assert!(
        refused.to_string().contains("worker certificate or key"),
        "{refused}"
    );
    poll(None).await.unwrap();
    std::fs::remove_file(&files.ca).unwrap();
    let refused = worker.reload_credentials().unwrap_err();
    assert!(refused.to_string().contains("ca.pem"), "{refused}");
    poll(None).await.unwrap();
    std::fs::write(&files.ca, &ca_pem).unwrap();

    // Good material (a certificate valid only for rotated.test): the watcher or this call
    // takes it, whichever reads the files first.
    files.rotate_leaf(&renamed);
    let taken = worker.reload_credentials().unwrap();
    assert!(matches!(
        taken,
        CredentialReload::Reloaded | CredentialReload::Unchanged
    ));
    assert_eq!(
        worker.reload_credentials().unwrap(),
        CredentialReload::Unchanged
    );
    poll(Some("rotated.test")).await.unwrap();
    let old_name = poll(None).await.unwrap_err();
    assert_eq!(old_name.kind(), ErrorKind::Handshake, "{old_name}");
}

/// Given reloadable client credentials, when their files turn bad (garbage, a key that does not
/// match, a missing file), then the connection keeps its material and its polls keep working;
/// made from files that are missing or bad, they fail at once, naming the problem.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reloadable_client_credentials_keep_their_material_when_the_files_go_bad() {
    let dir = tempfile::tempdir().unwrap();
    let ca = new_ca("ca");
    let ca_pem = ca.pem();
    let worker_leaf = new_leaf(&ca, dir.path(), "worker");
    let client_leaf = new_leaf(&ca, dir.path(), "client");
    let other = new_leaf(&ca, dir.path(), "other");
    let worker_files = Files::write(&dir.path().join("worker"), &ca_pem, &worker_leaf);
    let client_files = Files::write(&dir.path().join("client"), &ca_pem, &client_leaf);
    let worker = Worker::builder()
        .credentials_from_files(worker_files.server())
        .serve()
        .await
        .unwrap();
    let credentials = client_files.reloadable();
    assert!(credentials.is_reloadable() && credentials.is_mutual());
    assert_eq!(credentials, credentials.clone());
    assert_ne!(credentials, client_files.reloadable(), "distinct file sets");
    let connection =
        WorkerConnection::with_credentials(worker.address(), Some(credentials)).unwrap();
    connection.idle(Some(Duration::from_secs(5))).await.unwrap();
    for bad in [
        (&client_files.ca, "garbage\n".to_owned()),
        (&client_files.key, other.key_pem.clone()),
    ] {
        let good = std::fs::read_to_string(bad.0).unwrap();
        replace_file(bad.0, &bad.1);
        let until = Instant::now() + Duration::from_millis(1500);
        while Instant::now() < until {
            connection.idle(Some(Duration::from_secs(5))).await.unwrap();
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        replace_file(bad.0, &good);
    }
    std::fs::remove_file(&client_files.cert).unwrap();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    connection.idle(Some(Duration::from_secs(5))).await.unwrap();

    let missing = WorkerCredentials::from_files_reloadable(
        &client_files.ca,
        Some(&client_files.key),
        Some(&client_files.cert),
        true,
        None,
    )
    .unwrap_err();
    assert_eq!(missing.kind(), ErrorKind::InvalidArgument);
    assert!(missing.to_string().contains("cert.pem"), "{missing}");
    let no_key = WorkerCredentials::from_files_reloadable(&client_files.ca, None, None, true, None)
        .unwrap_err();
    assert_eq!(no_key.kind(), ErrorKind::InvalidArgument, "{no_key}");
    let one_way =
        WorkerCredentials::from_files_reloadable(&client_files.ca, None, None, false, None)
            .unwrap();
    assert!(!one_way.is_mutual());
}

/// Given `wool-worker` serving mutual TLS from files, when a file is replaced by garbage, then
/// it logs that it refuses it and new connections still get the old material; when good new
/// material replaces the files, it logs the reload and new connections get it; SIGHUP with
/// unchanged files is logged and does not end the worker; SIGHUP to a plaintext worker neither.
#[test]
fn wool_worker_reloads_on_change_refuses_bad_files_and_takes_sighup() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ca = new_ca("ca");
    let ca_pem = ca.pem();
    let first = new_leaf(&ca, dir.path(), "first");
    let renamed = new_leaf_for(&ca, dir.path(), "renamed", &["rotated.test"]);
    let client = new_leaf(&ca, dir.path(), "client");
    let files = Files::write(&dir.path().join("worker"), &ca_pem, &first);
    let args: Vec<String> = [
        ("--tls-ca", &files.ca),
        ("--tls-cert", &files.cert),
        ("--tls-key", &files.key),
    ]
    .iter()
    .flat_map(|(flag, path)| [flag.to_string(), path.display().to_string()])
    .collect();
    let (mut worker, log) = WorkerProcess::spawn_logging(&args, "info");
    let address = worker.address.clone();
    let poll = |identity: Option<&str>| {
        let mut credentials = client_mutual(&ca_pem, &client);
        if let Some(identity) = identity {
            credentials = credentials.with_identity(identity).unwrap();
        }
        let connection = fresh_connection(&address, credentials);
        runtime.block_on(connection.idle(Some(Duration::from_secs(5))))
    };
    poll(None).unwrap();

    replace_file(&files.cert, "-----BEGIN CERTIFICATE-----\nnot base64\n");
    let line = expect_log_line(&log, "refusing the TLS credentials", Duration::from_secs(5));
    assert!(line.contains("WARN"), "{line}");
    poll(None).unwrap();

    files.rotate_leaf(&renamed);
    expect_log_line(&log, "TLS credentials reloaded", Duration::from_secs(5));
    poll(Some("rotated.test")).unwrap();
    assert_eq!(poll(None).unwrap_err().kind(), ErrorKind::Handshake);

    // SAFETY: signalling our own child.
    assert_eq!(unsafe { libc::kill(worker.pid(), libc::SIGHUP) }, 0);
    expect_log_line(
        &log,
        "SIGHUP: the TLS files hold the material already in use",
        Duration::from_secs(5),
    );
    assert!(worker.is_running());
    poll(Some("rotated.test")).unwrap();

    let (mut plaintext, plaintext_log) = WorkerProcess::spawn_logging(&[], "info");
    // SAFETY: signalling our own child.
    assert_eq!(unsafe { libc::kill(plaintext.pid(), libc::SIGHUP) }, 0);
    expect_log_line(
        &plaintext_log,
        "no credentials to reload",
        Duration::from_secs(5),
    );
    assert!(plaintext.is_running());
}

// Rotation against Wool 0.15.7's own code (tests/interop/*.py under target/venvs/wool-0.15.7).

impl Files {
    /// Replaces all three files (CA, certificate, key) with another CA's material.
    fn rotate_to(&self, ca_pem: &str, leaf: &Leaf) {
        replace_file(&self.ca, ca_pem);
        self.rotate_leaf(leaf);
    }

    /// `--tls-ca CA --tls-cert CERT --tls-key KEY` over these files (the flags of both
    /// `wool-worker` and the Python peers).
    fn flags(&self) -> Vec<String> {
        [
            ("--tls-ca", &self.ca),
            ("--tls-cert", &self.cert),
            ("--tls-key", &self.key),
        ]
        .iter()
        .flat_map(|(flag, path)| [flag.to_string(), path.display().to_string()])
        .collect()
    }
}

/// What `wool_rotating_client.py` prints to name the CA a call's channel was keyed on: the
/// last 24 base64 characters of the PEM body.
fn ca_tag(ca_pem: &str) -> String {
    let body: String = ca_pem
        .split("-----END")
        .next()
        .unwrap()
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect();
    body[body.len() - 24..].to_owned()
}

/// The remote ports of the ESTABLISHED connections the worker listening on `port` has now.
fn established_ports(port: u16) -> std::collections::BTreeSet<u16> {
    worker_side_sockets(port)
        .into_iter()
        .filter(|(_, state)| *state == TCP_ESTABLISHED)
        .map(|(remote, _)| remote)
        .collect()
}

/// Waits up to `limit` for `condition`; whether it held, and after how long.
fn eventually(limit: Duration, mut condition: impl FnMut() -> bool) -> (bool, Duration) {
    let start = Instant::now();
    while !condition() {
        if start.elapsed() > limit {
            return (false, start.elapsed());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    (true, start.elapsed())
}

/// Polls with fresh connections made of `credentials()` until one is answered (the worker
/// serves the material they trust), for up to 10 s; how long that took.
fn first_answer_with(
    runtime: &tokio::runtime::Runtime,
    address: &str,
    credentials: impl Fn() -> WorkerCredentials,
) -> Duration {
    let start = Instant::now();
    loop {
        let probe = fresh_connection(address, credentials());
        match runtime.block_on(probe.idle(Some(Duration::from_secs(5)))) {
            Ok(_) => return start.elapsed(),
            Err(error) if start.elapsed() < Duration::from_secs(10) => {
                assert_eq!(error.kind(), ErrorKind::Handshake, "{error}");
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(error) => panic!("new material still refused after 10 s: {error}"),
        }
    }
}

/// Given our `wool-worker` serving mutual TLS from files of CA A and Wool 0.15.7's own client
/// (`wool.WorkerConnection`) polling it with a reloadable `WorkerCredentialsProvider` over
/// files of CA A, when the worker's files are rotated to CA B (the worker reloads them) and
/// then the client's, then not one of Wool's polls fails: before, its idle readings come
/// from A material; while only the worker is on B its connection made with A carries on;
/// after, its calls are keyed on B, the connection made with A is closed and a new one (which
/// the worker, now accepting only B, handshook with B) answers; its idle readings never go
/// back (the same worker process throughout). Wool's client holding only A material is
/// refused: `TransientRpcError`, UNAVAILABLE (Wool raises `HandshakeError` only from
/// `dispatch`).
#[test]
fn wools_reloadable_client_polls_our_worker_through_a_ca_rotation() {
    use common::python_peer::PythonPeer;
    let runtime = common::runtime();
    let dir = tempfile::tempdir().unwrap();
    let (ca_a, ca_b) = (new_ca("ca-a"), new_ca("ca-b"));
    let (a_pem, b_pem) = (ca_a.pem(), ca_b.pem());
    let (a_tag, b_tag) = (ca_tag(&a_pem), ca_tag(&b_pem));
    let worker_b = new_leaf(&ca_b, dir.path(), "worker-b");
    let client_a = new_leaf(&ca_a, dir.path(), "client-a");
    let client_b = new_leaf(&ca_b, dir.path(), "client-b");
    let worker_files = Files::write(
        &dir.path().join("worker"),
        &a_pem,
        &new_leaf(&ca_a, dir.path(), "worker-a"),
    );
    let client_files = Files::write(&dir.path().join("client"), &a_pem, &client_a);
    let stale_files = Files::write(&dir.path().join("stale"), &a_pem, &client_a);
    let stale_leaf_files = Files::write(&dir.path().join("stale-leaf"), &b_pem, &client_a);
    let (worker, log) = WorkerProcess::spawn_logging(&worker_files.flags(), "info");
    let address = worker.address.clone();
    let port = port_of(&address);

    let mut args = vec![address.clone()];
    args.extend(client_files.flags());
    args.extend(["--fresh-for", "0.2", "--interval", "0.05"].map(String::from));
    let mut wool = PythonPeer::spawn("0.15.7", "wool_rotating_client.py", &args);
    let ok_with = |tag: &str| {
        let tag = tag.to_owned();
        move |line: &str| line.starts_with("ok ") && line.ends_with(&tag)
    };
    for _ in 0..5 {
        wool.wait_for(Duration::from_secs(30), ok_with(&a_tag));
    }
    let before = established_ports(port);
    assert!(!before.is_empty(), "Wool's client holds no connection");

    // The worker's files to CA B; it reloads them.
    worker_files.rotate_to(&b_pem, &worker_b);
    let reloaded = Instant::now();
    expect_log_line(&log, "TLS credentials reloaded", Duration::from_secs(10));
    let served = first_answer_with(&runtime, &address, || client_mutual(&b_pem, &client_b));
    eprintln!(
        "wool-worker serves B {:?} after the files changed",
        reloaded.elapsed().max(served)
    );
    // Wool's client, still on A, carries on over its connection.
    for _ in 0..5 {
        wool.wait_for(Duration::from_secs(10), ok_with(&a_tag));
    }
    assert!(before.is_subset(&established_ports(port)));

    // The client's files to CA B: its provider serves them within fresh_for.
    client_files.rotate_to(&b_pem, &client_b);
    let rotated = Instant::now();
    wool.wait_for(Duration::from_secs(15), ok_with(&b_tag));
    eprintln!(
        "Wool's client polls with B {:?} after its files changed",
        rotated.elapsed()
    );
    for _ in 0..5 {
        wool.wait_for(Duration::from_secs(10), ok_with(&b_tag));
    }
    let (closed, after) = eventually(Duration::from_secs(10), || {
        established_ports(port).is_disjoint(&before)
    });
    assert!(
        closed,
        "Wool's connection made with A is still open: {before:?} in {:?}",
        established_ports(port)
    );
    eprintln!("Wool's connection made with A closed {after:?} after its first B poll");
    for _ in 0..3 {
        wool.wait_for(Duration::from_secs(10), ok_with(&b_tag));
    }

    // Wool's client holding only A material is refused (it does not trust the worker's new
    // certificate), and so is one trusting B but presenting A's certificate (the worker no
    // longer trusts it).
    for (stale, what) in [(&stale_files, "A only"), (&stale_leaf_files, "A's leaf")] {
        let mut stale_args = vec![repo_script("wool_client.py"), address.clone()];
        stale_args.extend(stale.flags());
        stale_args.push("expect-transient".into());
        let refused = std::process::Command::new(common::wool_python("0.15.7"))
            .args(&stale_args)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&refused.stdout).into_owned();
        eprintln!("Wool's client with {what}: {said}");
        assert_eq!(refused.status.code(), Some(0), "{what}: {said}");
        let mut said_lines = said.lines();
        assert_eq!(
            said_lines.next(),
            Some("TransientRpcError"),
            "{what}: {said}"
        );
        assert!(
            said_lines
                .next()
                .is_some_and(|l| l.starts_with("detail: UNAVAILABLE")),
            "{what}: {said}"
        );
    }

    assert_eq!(wool.finish(Duration::from_secs(15)), Some(0));
    assert_eq!(wool.seen.last().map(String::as_str), Some("done"));
    let polls = &wool.seen[..wool.seen.len() - 1];
    let failed: Vec<&String> = polls.iter().filter(|l| !l.starts_with("ok ")).collect();
    assert!(failed.is_empty(), "Wool's polls failed: {failed:?}");
    let (readings, tags): (Vec<f64>, Vec<&str>) = polls
        .iter()
        .map(|line| {
            let mut fields = line.split(' ').skip(1);
            let reading = fields.next().unwrap().parse::<f64>().unwrap();
            (reading, fields.next().unwrap())
        })
        .unzip();
    assert!(
        readings.windows(2).all(|pair| pair[1] >= pair[0]) && readings[0] >= 0.0,
        "idle readings went back: {readings:?}"
    );
    let first_b = tags.iter().position(|tag| *tag == b_tag).unwrap();
    assert!(
        tags[..first_b].iter().all(|tag| *tag == a_tag)
            && tags[first_b..].iter().all(|tag| *tag == b_tag),
        "material went A then B then back: {tags:?}"
    );
    eprintln!(
        "Wool's client: {} polls answered ({first_b} with A, {} with B), none failed",
        polls.len(),
        polls.len() - first_b
    );
}

/// `tests/interop/<name>` as an argument.
fn repo_script(name: &str) -> String {
    common::repo()
        .join("tests/interop")
        .join(name)
        .display()
        .to_string()
}

/// Readings of `connection.idle` every 20 ms until `stop`: (readings, failures).
fn poll_readings(
    connection: Arc<WorkerConnection>,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<(Vec<f64>, Vec<String>)> {
    tokio::spawn(async move {
        let (mut readings, mut failures) = (Vec::new(), Vec::new());
        while !stop.load(Ordering::Relaxed) {
            match connection.idle(Some(Duration::from_secs(5))).await {
                Ok(seconds) => readings.push(seconds),
                Err(error) => failures.push(format!("{:?}: {error}", error.kind())),
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        (readings, failures)
    })
}

/// Given a real Wool 0.15.7 worker (`LocalWorker`) serving mutual TLS through a reloadable
/// `WorkerCredentialsProvider` over files of CA A (`fresh_for` 0.2 s) and our connection
/// polling it with reloadable credentials over files of CA A, when the worker's files are
/// rotated to CA B and then the client's, then not one of our polls fails: Wool's worker
/// answers a new B connection once its provider has read the files again, our connection
/// made with A carries on meanwhile, and within our reload interval our client dials anew
/// (the connection made with A closes) and its polls go on; the idle readings never go back
/// (the same worker throughout). A client trusting only CA A, or presenting A's certificate,
/// is refused with `ErrorKind::Handshake`.
#[test]
fn our_reloadable_client_polls_a_wool_worker_with_reloadable_credentials_through_a_ca_rotation() {
    use common::python_peer::PythonPeer;
    let runtime = common::runtime();
    let dir = tempfile::tempdir().unwrap();
    let (ca_a, ca_b) = (new_ca("ca-a"), new_ca("ca-b"));
    let (a_pem, b_pem) = (ca_a.pem(), ca_b.pem());
    let both = format!("{a_pem}{b_pem}");
    let worker_b = new_leaf(&ca_b, dir.path(), "worker-b");
    let client_a = new_leaf(&ca_a, dir.path(), "client-a");
    let client_b = new_leaf(&ca_b, dir.path(), "client-b");
    let worker_files = Files::write(
        &dir.path().join("worker"),
        &a_pem,
        &new_leaf(&ca_a, dir.path(), "worker-a"),
    );
    let client_files = Files::write(&dir.path().join("client"), &a_pem, &client_a);
    let mut args = worker_files.flags();
    args.extend(["--reloadable", "--fresh-for", "0.2"].map(String::from));
    let mut wool = PythonPeer::spawn("0.15.7", "wool_worker.py", &args);
    let address = wool.wait_for(Duration::from_secs(90), |_| true);
    assert!(!address.starts_with("error"), "Wool's worker: {address}");
    let port = port_of(&address);

    let rotating = Arc::new(
        WorkerConnection::with_credentials(&address, Some(client_files.reloadable())).unwrap(),
    );
    runtime
        .block_on(rotating.idle(Some(Duration::from_secs(5))))
        .unwrap();
    let before = established_ports(port);
    assert!(!before.is_empty(), "our client holds no connection");
    let stop = Arc::new(AtomicBool::new(false));
    let poller = {
        let _in_runtime = runtime.enter();
        poll_readings(Arc::clone(&rotating), Arc::clone(&stop))
    };
    std::thread::sleep(Duration::from_millis(300));

    // The worker's files to CA B: Wool's provider reads them again on a handshake once
    // fresh_for has passed.
    worker_files.rotate_to(&b_pem, &worker_b);
    let served = first_answer_with(&runtime, &address, || client_mutual(&b_pem, &client_b));
    eprintln!("Wool's worker serves B {served:?} after its files changed");
    // Our connection made with A carries on.
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        before.is_subset(&established_ports(port)),
        "Wool's worker closed the connection made with A"
    );

    // The client's files to CA B: our client takes them within its reload interval.
    client_files.rotate_to(&b_pem, &client_b);
    let (closed, after) = eventually(Duration::from_secs(10), || {
        established_ports(port).is_disjoint(&before)
    });
    assert!(
        closed,
        "our connection made with A is still open: {before:?} in {:?}",
        established_ports(port)
    );
    eprintln!("our connection made with A closed {after:?} after the client's files changed");
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    let (readings, failures) = runtime.block_on(poller).unwrap();
    assert!(
        failures.is_empty(),
        "{} polls failed: {failures:?}",
        failures.len()
    );
    assert!(
        readings.len() > 20,
        "only {} polls answered",
        readings.len()
    );
    assert!(
        readings.windows(2).all(|pair| pair[1] >= pair[0]) && readings[0] >= 0.0,
        "idle readings went back: {readings:?}"
    );
    eprintln!("our client: {} polls answered, none failed", readings.len());
    runtime
        .block_on(rotating.idle(Some(Duration::from_secs(5))))
        .unwrap();

    // A client pinned to the old CA is refused: it cannot verify the worker's certificate.
    // One presenting A's certificate is refused too, but by the worker after the client's
    // TLS 1.3 handshake is over: grpcio closes the connection without an alert, so our client
    // sees a connection that went away (Transient), as Wool's own client does
    // (`TransientRpcError`, UNAVAILABLE).
    for (credentials, what, kind) in [
        (
            client_mutual(&a_pem, &client_a),
            "A only",
            ErrorKind::Handshake,
        ),
        (
            client_mutual(&both, &client_a),
            "A's leaf",
            ErrorKind::Transient,
        ),
    ] {
        let stale = fresh_connection(&address, credentials);
        let refused = runtime
            .block_on(stale.idle(Some(Duration::from_secs(5))))
            .unwrap_err();
        eprintln!("our client with {what}: {refused}");
        assert_eq!(refused.kind(), kind, "{what}: {refused}");
    }
    assert!(
        wool.child.try_wait().unwrap().is_none(),
        "Wool's worker ended"
    );
    assert_eq!(wool.finish(Duration::from_secs(30)), Some(0));
    assert_eq!(
        wool.seen.last().map(String::as_str),
        Some("stopped local"),
        "{:?}",
        wool.seen
    );
}
