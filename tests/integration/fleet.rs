//! The fleet layer against real pools and workers: discovery of real Wool 0.15.7 pools
//! (`LocalDiscovery` on this host; `LanDiscovery` across network namespaces this test makes),
//! sweeps, and the retire helper, including the race of a task that arrives between the poll
//! and the stop.

use crate::common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::netns::{link_or_skip, Link};
use common::{unique_namespace, WoolPool, WorkerProcess};
use libwool::connection::{ChannelOptions, Peers};
use libwool::fleet::discovery::{
    admit, DiscoveredWorker, Discovery, DiscoveryEvent, DnsDiscovery, LanDiscovery, LocalDiscovery,
    Origin, Refusal,
};
use libwool::fleet::{retire, sweep, Reason, RetirePolicy, SweepOptions};
use libwool::Grace;
use libwool::{ErrorKind, WorkerConnection};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// What both listings carry, for comparing ours with Wool's subscriber's JSON.
fn keys_of_ours(workers: &[DiscoveredWorker]) -> BTreeSet<String> {
    workers
        .iter()
        .map(|w| {
            format!(
                "{} {} {} {} {} {:?}",
                w.uid, w.address, w.pid, w.version, w.secure, w.identity
            )
        })
        .collect()
}

fn keys_of_wools(listing: &[serde_json::Value]) -> BTreeSet<String> {
    listing
        .iter()
        .map(|w| {
            format!(
                "{} {} {} {} {} {:?}",
                w["uid"].as_str().unwrap(),
                w["address"].as_str().unwrap(),
                w["pid"],
                w["version"].as_str().unwrap(),
                w["secure"],
                w["identity"].as_str()
            )
        })
        .collect()
}

/// Which way a watch is expected to move.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Expect {
    Joins,
    Leaves,
}

/// Takes events until `count` distinct workers joined (or left); updates are allowed between,
/// anything else fails the test. The uids seen.
fn collect(watch: &libwool::fleet::Watch, count: usize, expect: Expect) -> BTreeSet<uuid::Uuid> {
    let mut seen = BTreeSet::new();
    while seen.len() < count {
        match (
            expect,
            watch.next_timeout(Some(Duration::from_secs(15))).unwrap(),
        ) {
            (Expect::Joins, Some(DiscoveryEvent::Added(w)))
            | (Expect::Leaves, Some(DiscoveryEvent::Dropped(w))) => {
                seen.insert(w.uid);
            }
            (_, Some(DiscoveryEvent::Updated(_))) => {}
            (_, other) => panic!("expected {expect:?}, got {other:?} after {seen:?}"),
        }
    }
    seen
}

fn connect_all(workers: &[DiscoveredWorker]) -> Vec<WorkerConnection> {
    workers
        .iter()
        .map(|w| w.connect(None, ChannelOptions::default()).unwrap())
        .collect()
}

/// Whether the process has ended: gone, or a zombie its parent (Wool's pool) has not reaped.
fn process_gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        // "pid (comm) S ...": the state follows the last ')'.
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

fn wait_until(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    done()
}

/// Given a real Wool pool of 3 under a namespace, when we list the namespace, then the listing
/// equals Wool's own subscriber's (uid, address, pid, version, secure, identity) and every
/// worker answers a sweep.
#[test]
fn the_local_listing_equals_wools_own_subscriber() {
    let namespace = unique_namespace("list");
    let _pool = WoolPool::start(&namespace, 3, &[], None);
    let ours = LocalDiscovery::new(&namespace).unwrap().list().unwrap();
    let wools = WoolPool::wool_listing(&namespace, &[], None);
    assert_eq!(ours.len(), 3, "{ours:?}");
    assert_eq!(keys_of_ours(&ours), keys_of_wools(&wools));
    assert!(ours.iter().all(|w| w.version == "0.15.7" && !w.secure));
    let polls = runtime()
        .block_on(sweep(connect_all(&ours), &SweepOptions::default()))
        .unwrap();
    assert!(
        polls.iter().all(|p| matches!(p, Ok(s) if *s >= 0.0)),
        "{polls:?}"
    );
}

/// Given a watch started before its pool exists, when a Wool pool of 2 starts under the
/// namespace and later shuts down, then the watch reports both joins, then both leaves.
#[test]
fn a_watch_sees_a_pool_join_and_leave() {
    let namespace = unique_namespace("watch");
    let watch = LocalDiscovery::new(&namespace).unwrap().watch().unwrap();
    assert_eq!(
        watch
            .next_timeout(Some(Duration::from_millis(200)))
            .unwrap(),
        None
    );
    let pool = WoolPool::start(&namespace, 2, &[], None);
    let joined = collect(&watch, 2, Expect::Joins);
    let listed: BTreeSet<_> = LocalDiscovery::new(&namespace)
        .unwrap()
        .list()
        .unwrap()
        .into_iter()
        .map(|w| w.uid)
        .collect();
    assert_eq!(joined, listed);
    drop(pool);
    let left = collect(&watch, 2, Expect::Leaves);
    assert_eq!(left, joined);
}

/// Given a live worker, a worker without `idle`, a frozen worker and an address with nothing
/// behind it, when they are swept with a 1 s deadline, then each gets its own outcome, in order,
/// and the sweep ends at its deadline.
#[test]
fn a_sweep_reports_each_worker_in_order_within_one_deadline() {
    let live = WorkerProcess::plaintext();
    let frozen = WorkerProcess::plaintext();
    frozen.freeze();
    let dead = common::unused_local_address();
    let runtime = runtime();
    let (legacy, server) = runtime.block_on(common::serve_legacy_worker());
    let workers: Vec<WorkerConnection> = [&live.address, &legacy, &frozen.address, &dead]
        .iter()
        .map(|t| WorkerConnection::new(t).unwrap())
        .collect();
    let mut options = SweepOptions::default();
    options.timeout = Some(Duration::from_secs(1));
    options.max_in_flight = 2;
    let started = Instant::now();
    let polls = runtime.block_on(sweep(&workers, &options)).unwrap();
    let took = started.elapsed();
    frozen.thaw();
    assert!(matches!(polls[0], Ok(s) if s >= 0.0), "{polls:?}");
    assert_eq!(
        polls[1].as_ref().unwrap_err().kind(),
        ErrorKind::IdleUnavailable
    );
    let frozen_error = polls[2].as_ref().unwrap_err();
    assert_eq!(frozen_error.kind(), ErrorKind::Transient);
    assert_eq!(frozen_error.code(), Some(tonic::Code::DeadlineExceeded));
    assert_eq!(polls[3].as_ref().unwrap_err().kind(), ErrorKind::Transient);
    assert!(took < Duration::from_secs(10), "the sweep hung: {took:?}");
    options.max_in_flight = 0;
    assert_eq!(
        runtime
            .block_on(sweep(&workers, &options))
            .unwrap_err()
            .kind(),
        ErrorKind::InvalidArgument
    );
    server.abort();
}

/// Polls `worker` until it reads exactly 0.0 (a task is in flight there).
fn until_busy(runtime: &tokio::runtime::Runtime, worker: &WorkerConnection) {
    let busy = wait_until(Duration::from_secs(20), || {
        runtime.block_on(worker.idle(Some(Duration::from_secs(2)))) == Ok(0.0)
    });
    assert!(busy, "the task never reached the worker");
}

/// One run of the race: a worker idle past the threshold is decided for retirement, then a
/// task reaches it before the stop; returns the task's outcome and the stop's.
fn task_between_poll_and_stop(grace: Grace) -> (Result<Vec<u8>, libwool::Error>, Decision) {
    let mut worker = WorkerProcess::plaintext();
    let runtime = runtime();
    let connection = WorkerConnection::new(&worker.address).unwrap();
    std::thread::sleep(Duration::from_millis(600));
    let mut policy = RetirePolicy::new(Duration::from_millis(500));
    policy.grace = grace;
    policy.stop_timeout = Some(Duration::from_secs(20));
    let polls = runtime
        .block_on(sweep([&connection], &SweepOptions::default()))
        .unwrap();
    let mut decisions = retire::decide(polls, &policy);
    assert_eq!(decisions[0].reason, Reason::Idle, "{:?}", decisions[0]);
    // The race: a task arrives after the poll, before the stop.
    let dispatcher = WorkerConnection::new(&worker.address).unwrap();
    let task = runtime.spawn(async move {
        dispatcher
            .dispatch("sleep", b"1.0".to_vec(), Some(Duration::from_secs(20)))
            .await
    });
    until_busy(&runtime, &connection);
    runtime
        .block_on(retire::apply(
            &[Some(&connection)],
            &mut decisions,
            &policy,
            8,
        ))
        .unwrap();
    let outcome = runtime.block_on(task).unwrap();
    assert_eq!(
        worker.wait_exit(Duration::from_secs(20)),
        Some(0),
        "retired: exits 0"
    );
    (outcome, decisions.remove(0))
}

use libwool::fleet::Decision;

/// Given a worker decided idle, when a task reaches it between the poll and the stop, then with
/// a positive grace the task finishes and its caller gets the result (the stop drains it), and
/// with no grace (the control) the task is cancelled.
#[test]
fn a_task_that_arrives_between_the_poll_and_the_stop_loses_nothing_with_a_grace() {
    let (outcome, decision) = task_between_poll_and_stop(Grace::Within(Duration::from_secs(10)));
    assert_eq!(decision.stop, Some(Ok(())));
    assert!(outcome.is_ok(), "the task was lost: {outcome:?}");
    let (outcome, decision) = task_between_poll_and_stop(Grace::None);
    assert_eq!(decision.stop, Some(Ok(())));
    assert!(
        outcome.is_err(),
        "without a grace the stop cancels the task: {outcome:?}"
    );
}

/// Given three idle workers, when a dry run is reaped, then nothing stops; when reaped keeping
/// one, then the two most idle are retired (exit 0) and the least idle is kept for the minimum.
#[test]
fn dry_runs_stop_nothing_and_the_minimum_is_kept() {
    let mut workers: Vec<WorkerProcess> = (0..3)
        .map(|_| {
            let w = WorkerProcess::plaintext();
            std::thread::sleep(Duration::from_millis(150));
            w
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let connections: Vec<WorkerConnection> = workers
        .iter()
        .map(|w| WorkerConnection::new(&w.address).unwrap())
        .collect();
    let runtime = runtime();
    let mut policy = RetirePolicy::new(Duration::from_millis(200));
    policy.dry_run = true;
    let decisions = runtime
        .block_on(retire::reap(
            &connections,
            &policy,
            &SweepOptions::default(),
        ))
        .unwrap();
    assert!(decisions
        .iter()
        .all(|d| d.reason == Reason::Idle && d.stop.is_none()));
    std::thread::sleep(Duration::from_millis(300));
    assert!(workers.iter_mut().all(WorkerProcess::is_running));
    policy.dry_run = false;
    policy.keep_min = 1;
    policy.grace = Grace::None;
    let decisions = runtime
        .block_on(retire::reap(
            &connections,
            &policy,
            &SweepOptions::default(),
        ))
        .unwrap();
    let reasons: Vec<Reason> = decisions.iter().map(|d| d.reason).collect();
    // The first started is the most idle: retired first; the last is kept.
    assert_eq!(reasons, vec![Reason::Idle, Reason::Idle, Reason::Minimum]);
    assert_eq!(workers[0].wait_exit(Duration::from_secs(10)), Some(0));
    assert_eq!(workers[1].wait_exit(Duration::from_secs(10)), Some(0));
    assert!(workers[2].is_running());
}

/// Given a real Wool pool of 3 with one task sleeping on one worker, when the pool found by
/// namespace is reaped with a 1 s threshold, then the two idle workers are retired (their
/// processes end) and the busy one is kept, still running its task.
#[test]
fn reaping_a_wool_pool_retires_the_idle_workers_and_leaves_the_busy_one() {
    let namespace = unique_namespace("reap");
    let mut pool = WoolPool::start(&namespace, 3, &["--busy", "60"], None);
    pool.expect_line("busy-dispatched", Duration::from_secs(10));
    let found = LocalDiscovery::new(&namespace).unwrap().list().unwrap();
    assert_eq!(found.len(), 3);
    let connections = connect_all(&found);
    let runtime = runtime();
    // Until the task is in flight on one worker and the others have idled past the threshold.
    let settled = wait_until(Duration::from_secs(30), || {
        let polls = runtime
            .block_on(sweep(&connections, &SweepOptions::default()))
            .unwrap();
        polls.iter().filter(|p| **p == Ok(0.0)).count() == 1
            && polls
                .iter()
                .filter(|p| matches!(p, Ok(s) if *s >= 1.5))
                .count()
                == 2
    });
    assert!(
        settled,
        "the pool never showed one busy and two idle workers"
    );
    let mut policy = RetirePolicy::new(Duration::from_secs(1));
    policy.grace = Grace::Within(Duration::from_secs(5));
    policy.stop_timeout = Some(Duration::from_secs(30));
    let decisions = runtime
        .block_on(retire::reap(
            &connections,
            &policy,
            &SweepOptions::default(),
        ))
        .unwrap();
    let mut busy = None;
    for (worker, decision) in found.iter().zip(&decisions) {
        match decision.reason {
            Reason::Idle => {
                assert_eq!(decision.stop, Some(Ok(())), "{decision:?}");
                assert!(
                    wait_until(Duration::from_secs(15), || process_gone(worker.pid)),
                    "retired worker {} still running",
                    worker.pid
                );
            }
            Reason::Busy => busy = Some(worker),
            other => panic!("unexpected {other} for {worker:?}"),
        }
    }
    let busy = busy.expect("one worker kept as busy");
    assert!(!process_gone(busy.pid));
    let still = busy.connect(None, ChannelOptions::default()).unwrap();
    assert_eq!(
        runtime.block_on(still.idle(Some(Duration::from_secs(5)))),
        Ok(0.0)
    );
}

/// Given a Wool pool publishing over DNS-SD inside one network namespace, when a client in
/// another (joined by a veth pair; multicast never leaves the two) lists the namespace, then the
/// listing equals Wool's own LAN subscriber's there (a foreign record of the same service type
/// is skipped by both), every worker answers a sweep across the link, and a watch sees the
/// workers leave when the pool stops.
#[test]
fn the_lan_listing_equals_wools_own_subscriber_across_network_namespaces() {
    let Some(link) = link_or_skip("l") else {
        return;
    };
    let namespace = unique_namespace("lan");
    let pool = WoolPool::start(
        &namespace,
        2,
        &["--lan", "--advertise-host", &link.worker_ip],
        Some(&link.worker_ns),
    );
    // A foreign record of the same service type (no pid, no UUID name) beside the workers.
    let service_type = LanDiscovery::new(&namespace)
        .unwrap()
        .service_type()
        .to_owned();
    let worker_ip = link.worker_ip.clone();
    let _foreign = Link::run_in(&link.worker_ns, async move {
        let daemon = mdns_sd::ServiceDaemon::new().unwrap();
        let record = mdns_sd::ServiceInfo::new(
            &service_type,
            "not-a-worker",
            "foreign.local.",
            worker_ip.as_str(),
            4000,
            &[("version", "1")][..],
        )
        .unwrap();
        daemon.register(record).unwrap();
        daemon
    })
    .join()
    .unwrap();
    let wools = WoolPool::wool_listing(
        &namespace,
        &["--lan", "--seconds", "3"],
        Some(&link.client_ns),
    );
    let ns = namespace.clone();
    let (ours, polls, watch) = Link::run_in(&link.client_ns, async move {
        let lan = LanDiscovery::new(&ns)
            .unwrap()
            .listen_for(Duration::from_secs(3));
        let ours = lan.list().unwrap();
        let polls = sweep(connect_all(&ours), &SweepOptions::default())
            .await
            .unwrap();
        let watch = lan.watch().unwrap();
        (ours, polls, watch)
    })
    .join()
    .unwrap();
    assert_eq!(ours.len(), 2, "{ours:?}");
    assert_eq!(keys_of_ours(&ours), keys_of_wools(&wools));
    assert!(ours
        .iter()
        .all(|w| w.address.starts_with(&format!("{}:", link.worker_ip))));
    assert!(
        polls.iter().all(|p| matches!(p, Ok(s) if *s >= 0.0)),
        "{polls:?}"
    );
    let seen = collect(&watch, 2, Expect::Joins);
    drop(pool);
    let left = collect(&watch, 2, Expect::Leaves);
    assert_eq!(left, seen);
}

/// Given a plaintext Wool 0.15.7 pool, when a caller without credentials and one with them
/// pass its listing through the admission gate, then Wool's own records are admitted for the
/// first (their version and segments read as Wool's), and refused for the second on security,
/// which never connects them in plaintext with its credentials dropped.
#[test]
fn wools_own_records_pass_the_gate_and_a_plaintext_pool_is_refused_to_a_caller_with_credentials() {
    let pki = common::Pki::generate();
    let namespace = unique_namespace("gate");
    let _pool = WoolPool::start(&namespace, 2, &[], None);
    let found = LocalDiscovery::new(&namespace).unwrap().list().unwrap();
    assert_eq!(found.len(), 2, "{found:?}");
    let plain = admit(found.clone(), None);
    assert_eq!(plain.admitted.len(), 2, "{plain:?}");
    let credentials = pki.client_mutual(&pki.ca_pem, &pki.leaf);
    let gated = admit(found.clone(), Some(&credentials));
    assert!(gated.admitted.is_empty(), "{gated:?}");
    assert!(gated.refused.iter().all(|(_, r)| *r
        == Refusal::Security {
            worker_secure: false
        }));
    for worker in &found {
        let error = worker
            .connect(Some(&credentials), ChannelOptions::default())
            .unwrap_err();
        assert_eq!(error.kind(), ErrorKind::InvalidArgument, "{error}");
        assert!(error.message().contains("security"), "{error}");
    }
}

/// Given a Wool pool whose workers serve mutual TLS with a certificate valid only for the name
/// they advertise as their identity (not for 127.0.0.1), when the pool is listed and swept,
/// then the listing says secure with that identity, the workers cannot be reached without
/// credentials (refused before any I/O); with credentials but no peers policy the
/// advertisement is ignored (verified against the address: the handshake fails); under a
/// policy accepting the name it is pinned and they answer; under one that does not they are
/// refused naming the accepted peers.
#[test]
fn secure_workers_are_reached_with_the_callers_credentials_and_their_identity() {
    let pki = common::Pki::generate();
    let namespace = unique_namespace("secure");
    let ca = pki.ca_path.display().to_string();
    let cert = pki.named_leaf.cert_path.display().to_string();
    let key = pki.named_leaf.key_path.display().to_string();
    let _pool = WoolPool::start(
        &namespace,
        2,
        &[
            "--tls-ca",
            &ca,
            "--tls-cert",
            &cert,
            "--tls-key",
            &key,
            "--identity",
            common::NAMED_LEAF_IDENTITY,
        ],
        None,
    );
    let found = LocalDiscovery::new(&namespace).unwrap().list().unwrap();
    assert_eq!(found.len(), 2);
    assert_eq!(
        keys_of_ours(&found),
        keys_of_wools(&WoolPool::wool_listing(&namespace, &[], None))
    );
    for worker in &found {
        assert!(worker.secure, "{worker:?}");
        assert_eq!(
            worker.identity.as_deref(),
            Some(common::NAMED_LEAF_IDENTITY)
        );
        let refused = worker.connect(None, ChannelOptions::default()).unwrap_err();
        assert_eq!(refused.kind(), ErrorKind::InvalidArgument);
    }
    let unpinned = pki.client_mutual(&pki.ca_pem, &pki.named_leaf);
    let runtime = runtime();
    let ignored = found[0]
        .connect(Some(&unpinned), ChannelOptions::default())
        .unwrap();
    let error = runtime
        .block_on(ignored.idle(Some(Duration::from_secs(5))))
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Handshake, "{error}");
    let elsewhere = unpinned.with_peers(Peers::names(["w1", "w2"]).unwrap());
    let refusal = found[0].refusal(Some(&elsewhere)).unwrap();
    assert_eq!(refusal.arm(), "identity");
    assert!(
        refusal.to_string().contains("accepted peers: w1, w2"),
        "{refusal}"
    );
    let credentials = unpinned.with_peers(Peers::name(common::NAMED_LEAF_IDENTITY).unwrap());
    let workers: Vec<WorkerConnection> = found
        .iter()
        .map(|w| {
            w.connect(Some(&credentials), ChannelOptions::default())
                .unwrap()
        })
        .collect();
    let polls = runtime
        .block_on(sweep(&workers, &SweepOptions::default()))
        .unwrap();
    assert!(
        polls.iter().all(|p| matches!(p, Ok(s) if *s >= 0.0)),
        "{polls:?}"
    );
    // The control: the same credentials verifying the address instead fail the handshake.
    let by_address =
        WorkerConnection::with_credentials(&found[0].address, Some(credentials)).unwrap();
    let error = runtime
        .block_on(by_address.idle(Some(Duration::from_secs(5))))
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Handshake, "{error}");
}

/// Given a worker that is not yet idle long enough, when `reap_every` runs rounds 100 ms apart,
/// then early rounds keep it (below threshold), a later one retires it, and the loop ends when
/// the round callback says so.
#[test]
fn reap_every_runs_rounds_until_told_to_stop() {
    let mut worker = WorkerProcess::plaintext();
    let address = worker.address.clone();
    let mut policy = RetirePolicy::new(Duration::from_millis(700));
    policy.grace = Grace::None;
    policy.stop_timeout = Some(Duration::from_secs(5));
    let mut reasons = Vec::new();
    runtime()
        .block_on(retire::reap_every(
            Duration::from_millis(100),
            &policy,
            &SweepOptions::default(),
            || vec![WorkerConnection::new(&address).unwrap()],
            |_, decisions| {
                reasons.push(decisions[0].reason);
                decisions[0].reason != Reason::Idle && reasons.len() < 100
            },
        ))
        .unwrap();
    assert_eq!(reasons.last(), Some(&Reason::Idle), "{reasons:?}");
    assert!(reasons[0] == Reason::BelowThreshold, "{reasons:?}");
    assert_eq!(worker.wait_exit(Duration::from_secs(10)), Some(0));
}

/// Given a plaintext worker on 127.0.0.1, when `DnsDiscovery` lists `localhost` at its port,
/// then the worker is one record (origin DNS, identity `localhost`, nothing else advertised),
/// the admission gate admits it with no credentials, and it answers a poll; the same through
/// `Discovery::Dns`, which cannot watch.
#[test]
fn dns_discovery_lists_a_worker_by_name() {
    let worker = WorkerProcess::plaintext();
    let port = common::port_of(&worker.address);
    let dns = DnsDiscovery::new("localhost", port).unwrap();
    let found = dns.list().unwrap();
    let ours: Vec<&DiscoveredWorker> = found
        .iter()
        .filter(|w| w.address == worker.address)
        .collect();
    assert_eq!(ours.len(), 1, "{found:?}");
    assert_eq!(ours[0].origin, Origin::Dns);
    assert_eq!(ours[0].identity.as_deref(), Some("localhost"));
    assert!(!ours[0].secure && ours[0].version.is_empty() && ours[0].uid.is_nil());
    let discovery = Discovery::Dns(dns);
    let admission = discovery.list_admitted(None).unwrap();
    assert!(admission.refused.is_empty(), "{admission:?}");
    assert_eq!(admission.admitted, found);
    let connection = ours[0].connect(None, ChannelOptions::default()).unwrap();
    let idle = runtime()
        .block_on(connection.idle(Some(Duration::from_secs(5))))
        .unwrap();
    assert!(idle >= 0.0);
    assert_eq!(discovery.namespace(), "localhost");
    let error = discovery.watch().unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidArgument);
}

/// Given mutual-TLS workers on 127.0.0.1, one with a certificate for `localhost` and one for
/// another name, when their DNS records are connected with credentials, then both are admitted
/// (a DNS record advertises no security: the caller's credentials decide), each is verified
/// against the DNS name, so the first answers and the second fails the handshake, and an
/// explicit server name in the credentials wins over the DNS name.
#[test]
fn dns_records_are_reached_with_the_callers_credentials_and_verified_by_name() {
    let pki = common::Pki::generate();
    let localhost = WorkerProcess::spawn(&pki.mutual_args());
    let named = WorkerProcess::spawn(&[
        "--tls-ca".into(),
        pki.ca_path.display().to_string(),
        "--tls-cert".into(),
        pki.named_leaf.cert_path.display().to_string(),
        "--tls-key".into(),
        pki.named_leaf.key_path.display().to_string(),
    ]);
    let credentials = pki.client_mutual(&pki.ca_pem, &pki.leaf);
    let runtime = runtime();
    let record = |worker: &WorkerProcess| {
        let listed = DnsDiscovery::new("localhost", common::port_of(&worker.address))
            .unwrap()
            .list()
            .unwrap();
        listed
            .into_iter()
            .find(|w| w.address == worker.address)
            .expect("listed")
    };
    let poll = |record: &DiscoveredWorker, credentials: &libwool::WorkerCredentials| {
        assert!(record.refusal(Some(credentials)).is_none());
        let connection = record
            .connect(Some(credentials), ChannelOptions::default())
            .unwrap();
        runtime.block_on(connection.idle(Some(Duration::from_secs(5))))
    };
    assert!(poll(&record(&localhost), &credentials).unwrap() >= 0.0);
    let error = poll(&record(&named), &credentials).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Handshake, "{error}");
    let explicit = credentials
        .with_identity(common::NAMED_LEAF_IDENTITY)
        .unwrap();
    assert!(poll(&record(&named), &explicit).unwrap() >= 0.0);
}
