//! Silent workers: keepalive on the client and on the worker, against workers that stop
//! answering without closing anything — a frozen process (SIGSTOP) and a network path cut in
//! network namespaces this test makes itself (its addresses exist only inside them).

use crate::common;

use std::ffi::CString;
use std::time::{Duration, Instant};

use common::netns::{link_or_skip, Link};
use common::{port_of, worker_side_sockets, WorkerProcess, TCP_CLOSE_WAIT, TCP_ESTABLISHED};
use libwool::connection::{ChannelOptions, ErrorKind, WorkerConnection};
use wool::{self as ffi, wool_status};

/// Keepalive 1 s / 1 s: a silent worker is given up on after about 2 s.
fn short_keepalive() -> ChannelOptions {
    let mut options = ChannelOptions::default();
    options.keepalive_interval = Some(Duration::from_secs(1));
    options.keepalive_timeout = Duration::from_secs(1);
    options
}

/// Far longer than interval + timeout, to tell "ended by keepalive" from "hung".
const GENEROUS: Duration = Duration::from_secs(30);

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Given a worker frozen under a Rust call with no deadline, then the call ends as transient
/// naming keepalive within interval + timeout (not never), and once thawed the next call works.
#[test]
fn a_call_with_no_deadline_to_a_frozen_worker_ends_transient() {
    let worker = WorkerProcess::plaintext();
    let runtime = runtime();
    runtime.block_on(async {
        let conn =
            WorkerConnection::with_options(&worker.address, None, short_keepalive()).unwrap();
        conn.idle(Some(Duration::from_secs(5))).await.unwrap();
        worker.freeze();
        let started = Instant::now();
        let outcome = tokio::time::timeout(GENEROUS, conn.idle(None)).await;
        let took = started.elapsed();
        worker.thaw();
        let error = outcome
            .expect("the call must end by keepalive, not hang")
            .unwrap_err();
        eprintln!("frozen worker: idle(None) ended after {took:?}: {error}");
        assert_eq!(error.kind(), ErrorKind::Transient, "{error}");
        assert_eq!(error.code(), Some(tonic::Code::Unavailable));
        assert!(error.message().contains("keepalive"), "{error}");
        assert!(error.message().contains(&worker.address), "{error}");
        let idle = conn.idle(Some(Duration::from_secs(10))).await.unwrap();
        assert!(idle >= 0.0);
    });
}

/// Given a C host holding a pooled connection and making no call, when the worker freezes,
/// then the library's housekeeping turns still send keepalive PINGs, notice the missing answer
/// and close the dead connection (the worker's side of it goes to CLOSE_WAIT without any call);
/// once thawed, the next call dials anew and succeeds.
#[test]
fn a_c_host_between_calls_drops_a_pooled_connection_whose_worker_froze() {
    let worker = WorkerProcess::plaintext();
    let port = port_of(&worker.address);
    let target = CString::new(worker.address.as_str()).unwrap();
    let mut options = std::ptr::null_mut();
    let mut conn = std::ptr::null_mut();
    let mut seconds = -1.0;
    // SAFETY: valid pointers throughout; each handle freed once at the end.
    unsafe {
        assert_eq!(ffi::wool_channel_options_new(&mut options), wool_status::Ok);
        assert_eq!(
            ffi::wool_channel_options_set_keepalive_interval(options, 1.0),
            wool_status::Ok
        );
        assert_eq!(
            ffi::wool_channel_options_set_keepalive_timeout(options, 1.0),
            wool_status::Ok
        );
        assert_eq!(
            ffi::wool_connect_with_options(target.as_ptr(), std::ptr::null(), options, &mut conn),
            wool_status::Ok
        );
        ffi::wool_channel_options_free(options);
        assert_eq!(ffi::wool_idle(conn, 5.0, &mut seconds), wool_status::Ok);
    }
    let open = worker_side_sockets(port);
    assert_eq!(
        open.iter()
            .filter(|(_, state)| *state == TCP_ESTABLISHED)
            .count(),
        1,
        "one pooled connection: {open:?}"
    );
    worker.freeze();
    let deadline = Instant::now() + GENEROUS;
    let closed = loop {
        let sockets = worker_side_sockets(port);
        if sockets.iter().any(|(_, state)| *state == TCP_CLOSE_WAIT)
            && !sockets.iter().any(|(_, state)| *state == TCP_ESTABLISHED)
        {
            break Some(Instant::now());
        }
        if Instant::now() > deadline {
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    worker.thaw();
    assert!(
        closed.is_some(),
        "the idle host never dropped the dead connection: {:?}",
        worker_side_sockets(port)
    );
    // SAFETY: as above.
    unsafe {
        assert_eq!(ffi::wool_idle(conn, 10.0, &mut seconds), wool_status::Ok);
        ffi::wool_free(conn);
    }
}

// ---- a cut network path, in network namespaces made here ---------------------------------

/// Given a worker whose network path is cut (no RST, no FIN) after a first poll, when a call
/// with no deadline goes out on the pooled connection, then it ends as transient naming
/// keepalive within interval + timeout.
#[test]
fn a_call_with_no_deadline_over_a_cut_link_ends_transient() {
    let Some(link) = link_or_skip("c") else {
        return;
    };
    let (_worker, port) = link.spawn_worker(&[]);
    let target = format!("{}:{port}", link.worker_ip);
    let (polled_tx, polled_rx) = std::sync::mpsc::channel();
    let (cut_tx, cut_rx) = std::sync::mpsc::channel::<()>();
    let client = Link::run_in(&link.client_ns, async move {
        let conn = WorkerConnection::with_options(&target, None, short_keepalive()).unwrap();
        conn.idle(Some(Duration::from_secs(5))).await.unwrap();
        polled_tx.send(()).unwrap();
        cut_rx.recv().unwrap();
        let started = Instant::now();
        let outcome = tokio::time::timeout(GENEROUS, conn.idle(None)).await;
        (
            outcome.map(|result| result.map_err(|e| (e.kind(), e.to_string()))),
            started.elapsed(),
        )
    });
    polled_rx.recv().unwrap();
    link.cut();
    cut_tx.send(()).unwrap();
    let (outcome, took) = client.join().unwrap();
    let (kind, message) = outcome
        .expect("the call must end by keepalive, not hang")
        .unwrap_err();
    eprintln!("cut link: idle(None) ended after {took:?}: {message}");
    assert_eq!(kind, ErrorKind::Transient, "{message}");
    assert!(message.contains("keepalive"), "{message}");
}

/// Given a caller with a task in flight whose link is then cut, then the worker's keepalive
/// (1 s / 1 s, `wool-worker` flags) drops the caller's connection and cancels the task: the
/// worker's in-flight set empties (its idle clock runs again) long before the 60 s task would
/// have ended.
#[test]
fn a_caller_cut_off_mid_task_leaves_the_workers_in_flight_set() {
    let Some(link) = link_or_skip("w") else {
        return;
    };
    let (_worker, port) =
        link.spawn_worker(&["--keepalive-interval", "1", "--keepalive-timeout", "1"]);
    let target = format!("{}:{port}", link.worker_ip);
    let local = format!("127.0.0.1:{port}");
    // The caller: no keepalive of its own, so only the worker's can notice the cut.
    let _caller = Link::run_in(&link.client_ns, async move {
        let mut options = ChannelOptions::default();
        options.keepalive_interval = None;
        let conn = WorkerConnection::with_options(&target, None, options).unwrap();
        let _ = conn
            .dispatch("sleep", b"60".to_vec(), Some(Duration::from_secs(90)))
            .await;
    });
    // An observer inside the worker's namespace, over loopback (untouched by the cut).
    let (busy_tx, busy_rx) = std::sync::mpsc::channel();
    let (cut_tx, cut_rx) = std::sync::mpsc::channel::<Instant>();
    let observer = Link::run_in(&link.worker_ns, async move {
        let conn = WorkerConnection::new(&local).unwrap();
        let started = Instant::now();
        while conn.idle(Some(Duration::from_secs(5))).await.unwrap() > 0.0 {
            assert!(started.elapsed() < GENEROUS, "the task never started");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        busy_tx.send(()).unwrap();
        let cut_at = cut_rx.recv().unwrap();
        loop {
            let idle = conn.idle(Some(Duration::from_secs(5))).await.unwrap();
            if idle > 0.0 || cut_at.elapsed() > GENEROUS {
                return (idle, cut_at.elapsed());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    busy_rx.recv().unwrap();
    link.cut();
    cut_tx.send(Instant::now()).unwrap();
    let (idle, took) = observer.join().unwrap();
    eprintln!("cut caller: the worker's in-flight set emptied {took:?} after the cut");
    assert!(idle > 0.0, "still busy {took:?} after the cut");
}

/// Channel options out of range are refused before any I/O, naming the option.
#[test]
fn channel_options_out_of_range_are_refused_naming_the_option() {
    type Spoil = fn(&mut ChannelOptions);
    let cases: [(&str, Spoil); 6] = [
        ("max_receive_message_bytes", |o| {
            o.max_receive_message_bytes = 0
        }),
        ("max_send_message_bytes", |o| o.max_send_message_bytes = 0),
        ("keepalive_interval", |o| {
            o.keepalive_interval = Some(Duration::ZERO)
        }),
        ("keepalive_timeout", |o| {
            o.keepalive_timeout = Duration::from_micros(10)
        }),
        ("max_concurrent_streams", |o| o.max_concurrent_streams = 0),
        ("connect_timeout", |o| {
            o.connect_timeout = Some(Duration::ZERO)
        }),
    ];
    for (name, spoil) in cases {
        let mut options = ChannelOptions::default();
        spoil(&mut options);
        let error = WorkerConnection::with_options("127.0.0.1:1", None, options).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::InvalidArgument, "{name}");
        assert!(error.message().contains(name), "{name}: {error}");
    }
    let mut off = ChannelOptions::default();
    off.keepalive_interval = None;
    off.connect_timeout = None;
    off.max_pings_without_data = 0;
    assert!(WorkerConnection::with_options("127.0.0.1:1", None, off).is_ok());
}
