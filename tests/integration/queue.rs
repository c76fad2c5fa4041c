//! The completion queue's cancellation, seen from the worker's side: `wool_cancel` resets the
//! call's HTTP/2 stream, so the worker's handler is dropped (as for any cancelled gRPC call).

use crate::common;

use std::ffi::CString;
use std::time::{Duration, Instant};

use wool::{self as ffi, wool_completion, wool_status};

/// A worker whose `idle` never answers and reports, through `dropped`, when its handler is
/// dropped (the client reset the stream).
async fn serve_hanging_idle(
    dropped: std::sync::mpsc::Sender<()>,
) -> (String, tokio::task::JoinHandle<()>) {
    struct Report(std::sync::mpsc::Sender<()>);
    impl Drop for Report {
        fn drop(&mut self) {
            let _ = self.0.send(());
        }
    }
    let dropped = std::sync::Mutex::new(dropped);
    common::serve_idle_with(move || {
        let report = Report(dropped.lock().unwrap().clone());
        Box::pin(async move {
            let _report = report;
            std::future::pending().await
        })
    })
    .await
}

/// Given an idle poll started without blocking that the worker never answers, when it is
/// cancelled, then it completes at once with WOOL_STATUS_CANCELLED and the worker sees the
/// cancellation: its handler is dropped (the stream was reset), long before any deadline.
#[test]
fn a_cancelled_call_resets_its_stream_and_the_worker_sees_it() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (dropped_tx, dropped) = std::sync::mpsc::channel();
    let (address, server) = runtime.block_on(serve_hanging_idle(dropped_tx));
    let target = CString::new(address).unwrap();
    let mut conn = std::ptr::null_mut();
    let mut queue = std::ptr::null_mut();
    let mut call = 0;
    // SAFETY: valid pointers; each handle freed once.
    unsafe {
        assert_eq!(
            ffi::wool_connect(target.as_ptr(), std::ptr::null(), &mut conn),
            wool_status::Ok
        );
        assert_eq!(ffi::wool_queue_new(&mut queue), wool_status::Ok);
        assert_eq!(
            ffi::wool_idle_start(conn, queue, f64::INFINITY, 42, &mut call),
            wool_status::Ok
        );
    }
    // The worker's handler is running once the poll reached it.
    std::thread::sleep(Duration::from_millis(500));
    assert!(dropped.try_recv().is_err(), "the handler is still waiting");
    let cancelled_at = Instant::now();
    // SAFETY: as above.
    let completion = unsafe {
        assert_eq!(ffi::wool_cancel(queue, call), wool_status::Ok);
        let mut completion = std::mem::MaybeUninit::<wool_completion>::uninit();
        let mut count = 0;
        assert_eq!(
            ffi::wool_queue_next(queue, completion.as_mut_ptr(), 1, 5.0, &mut count),
            wool_status::Ok
        );
        assert_eq!(count, 1);
        completion.assume_init()
    };
    assert_eq!((completion.tag, completion.call), (42, call));
    assert_eq!(completion.status, wool_status::Cancelled);
    dropped
        .recv_timeout(Duration::from_secs(10))
        .expect("the worker's handler is dropped: the stream was reset");
    eprintln!(
        "cancel: completion at once, worker saw the reset {:?} after wool_cancel",
        cancelled_at.elapsed()
    );
    // SAFETY: as above.
    unsafe {
        ffi::wool_queue_free(queue);
        ffi::wool_free(conn);
    }
    server.abort();
}

// ---- the started sweep (wool_idle_many_start) and the growable completion ------------------

use wool::{
    wool_completion_ex, wool_connection, wool_poll_result, wool_queue, WOOL_COMPLETION_KIND_IDLE,
    WOOL_COMPLETION_KIND_SWEEP,
};

/// A byte no result the library writes is made of: the host's array is filled with it, so
/// that any write to it shows.
const SENTINEL: u8 = 0xA5;

/// `count` results, every byte [`SENTINEL`].
fn sentinel_results(count: usize) -> Vec<wool_poll_result> {
    let mut results = Vec::with_capacity(count);
    // SAFETY: `count` elements of plain data, every byte written before any is read.
    unsafe {
        std::ptr::write_bytes(results.as_mut_ptr(), SENTINEL, count);
        results.set_len(count);
    }
    results
}

fn untouched(results: &[wool_poll_result]) -> bool {
    // SAFETY: plain data, every byte initialized.
    let bytes = unsafe {
        std::slice::from_raw_parts(
            results.as_ptr().cast::<u8>(),
            std::mem::size_of_val(results),
        )
    };
    bytes.iter().all(|&byte| byte == SENTINEL)
}

fn connect(address: &str) -> *mut wool_connection {
    let target = CString::new(address).unwrap();
    let mut conn = std::ptr::null_mut();
    // SAFETY: a NUL-terminated target and a writable out-pointer.
    let status = unsafe { ffi::wool_connect(target.as_ptr(), std::ptr::null(), &mut conn) };
    assert_eq!(status, wool_status::Ok);
    conn
}

fn new_queue() -> *mut wool_queue {
    let mut queue = std::ptr::null_mut();
    // SAFETY: a writable out-pointer.
    assert_eq!(unsafe { ffi::wool_queue_new(&mut queue) }, wool_status::Ok);
    queue
}

/// Every completion collected within `limit` (waiting at most `limit` for each), as
/// `wool_completion_ex`.
fn completions_within(queue: *const wool_queue, limit: f64) -> Vec<wool_completion_ex> {
    let mut all = Vec::new();
    loop {
        let mut batch = std::mem::MaybeUninit::<[wool_completion_ex; 8]>::uninit();
        let mut count = 0;
        // SAFETY: 8 writable completions of the size given; a live queue.
        let status = unsafe {
            ffi::wool_queue_next_sized(
                queue,
                batch.as_mut_ptr().cast(),
                8,
                std::mem::size_of::<wool_completion_ex>(),
                limit,
                &mut count,
            )
        };
        assert_eq!(status, wool_status::Ok);
        if count == 0 {
            return all;
        }
        // SAFETY: the first `count` elements were written.
        let batch = unsafe { batch.assume_init_ref() };
        all.extend_from_slice(&batch[..count]);
    }
}

fn message(text: &[std::ffi::c_char]) -> String {
    // SAFETY: the library writes NUL-terminated text into the array.
    unsafe { std::ffi::CStr::from_ptr(text.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}

/// Starts a sweep of `conns` into `queue`, tagged `tag`; returns its call id.
fn start_sweep(
    conns: &[*const wool_connection],
    timeout: f64,
    queue: *const wool_queue,
    tag: u64,
    results: &mut [wool_poll_result],
) -> u64 {
    assert_eq!(conns.len(), results.len());
    let mut call = 0;
    // SAFETY: `conns.len()` handles (NULL or live), as many results, a live queue.
    let status = unsafe {
        ffi::wool_idle_many_start(
            conns.as_ptr(),
            conns.len(),
            timeout,
            4,
            queue,
            tag,
            results.as_mut_ptr(),
            &mut call,
        )
    };
    assert_eq!(status, wool_status::Ok);
    assert_ne!(call, 0);
    call
}

/// Given a fleet of a live worker (three times), a dead address, a NULL handle and a worker
/// without the idle RPC, when it is swept with wool_idle_many_start, then exactly one
/// completion arrives (OK, kind SWEEP, count = the fleet's size, the tag and call id given),
/// and each result is what the blocking wool_idle_many gives for the same handle, with the
/// failure's message per worker: a dead address's names it as unreachable.
#[test]
fn a_started_sweep_gives_what_the_blocking_sweep_gives_and_completes_once() {
    let runtime = common::runtime();
    let worker = common::WorkerProcess::plaintext();
    let (legacy_address, legacy_server) = runtime.block_on(common::serve_legacy_worker());
    let live = connect(&worker.address);
    let dead = connect(&common::unused_local_address());
    let legacy = connect(&legacy_address);
    let conns: Vec<*const wool_connection> = vec![live, dead, std::ptr::null(), live, legacy, live];
    let n = conns.len();

    let mut seconds = vec![0.0; n];
    let mut statuses = vec![wool_status::Panic; n];
    let mut codes = vec![0; n];
    // SAFETY: `n` handles and `n` writable elements each.
    let blocking = unsafe {
        ffi::wool_idle_many(
            conns.as_ptr(),
            n,
            10.0,
            4,
            seconds.as_mut_ptr(),
            statuses.as_mut_ptr(),
            codes.as_mut_ptr(),
        )
    };
    assert_eq!(blocking, wool_status::Ok);

    let queue = new_queue();
    let mut results = sentinel_results(n);
    let call = start_sweep(&conns, 10.0, queue, 77, &mut results);
    let completions = completions_within(queue, 10.0);
    assert_eq!(completions.len(), 1, "one completion per sweep");
    let done = &completions[0];
    assert_eq!((done.completion.tag, done.completion.call), (77, call));
    assert_eq!(done.completion.status, wool_status::Ok);
    assert_eq!(done.completion.rpc_code, -1);
    assert_eq!((done.kind, done.reserved), (WOOL_COMPLETION_KIND_SWEEP, 0));
    assert_eq!(done.count, n as u64);
    for (index, result) in results.iter().enumerate() {
        let text = message(&result.message);
        eprintln!(
            "slot {index}: {:?} code {} seconds {} {text:?}",
            result.status, result.rpc_code, result.seconds
        );
        assert_eq!(result.status, statuses[index], "slot {index}");
        assert_eq!(result.rpc_code, codes[index], "slot {index}");
        if result.status == wool_status::Ok {
            assert!(
                result.seconds >= 0.0 && seconds[index] >= 0.0,
                "slot {index}"
            );
            assert!(text.is_empty(), "slot {index}: {text}");
        } else {
            assert!(
                result.seconds.is_nan() && seconds[index].is_nan(),
                "slot {index}"
            );
            assert!(text.starts_with("wool_idle: "), "slot {index}: {text}");
        }
    }
    assert_eq!(results[0].status, wool_status::Ok);
    assert_eq!(results[1].status, wool_status::Transient);
    assert!(message(&results[1].message).len() > "wool_idle: ".len());
    assert_eq!(results[2].status, wool_status::InvalidArgument);
    assert!(message(&results[2].message).contains("conns[2] is NULL"));
    assert_eq!(results[4].status, wool_status::IdleUnavailable);
    assert_eq!(results[4].rpc_code, 12);

    // A sweep of nothing: one completion at once, count 0; NULL arrays are allowed then.
    let mut empty_call = 0;
    // SAFETY: count 0 with NULL arrays; a live queue and a writable out-pointer.
    let status = unsafe {
        ffi::wool_idle_many_start(
            std::ptr::null(),
            0,
            1.0,
            1,
            queue,
            5,
            std::ptr::null_mut(),
            &mut empty_call,
        )
    };
    assert_eq!(status, wool_status::Ok);
    let completions = completions_within(queue, 5.0);
    assert_eq!(completions.len(), 1);
    assert_eq!(completions[0].completion.call, empty_call);
    assert_eq!(completions[0].completion.status, wool_status::Ok);
    assert_eq!(
        (completions[0].kind, completions[0].count),
        (WOOL_COMPLETION_KIND_SWEEP, 0)
    );

    // SAFETY: each handle freed once, after its last use.
    unsafe {
        ffi::wool_queue_free(queue);
        ffi::wool_free(live);
        ffi::wool_free(dead);
        ffi::wool_free(legacy);
    }
    legacy_server.abort();
}

/// Given bad arguments, then wool_idle_many_start refuses them with
/// WOOL_STATUS_INVALID_ARGUMENT, starts nothing (no completion) and writes nothing.
#[test]
fn a_started_sweep_refuses_bad_arguments_and_starts_nothing() {
    let conn = connect(&common::unused_local_address());
    let queue = new_queue();
    let conns = [conn as *const wool_connection];
    let mut results = sentinel_results(1);
    let mut call = 12345;
    let out = results.as_mut_ptr();
    type Case = (
        &'static str,
        *const *const wool_connection,
        usize,
        f64,
        usize,
    );
    let cases: [(Case, *const wool_queue, *mut wool_poll_result, *mut u64); 7] = [
        (
            ("NULL conns", std::ptr::null(), 1, 1.0, 1),
            queue,
            out,
            &mut call,
        ),
        (
            ("NULL out_results", conns.as_ptr(), 1, 1.0, 1),
            queue,
            std::ptr::null_mut(),
            &mut call,
        ),
        (
            ("max_in_flight 0", conns.as_ptr(), 1, 1.0, 0),
            queue,
            out,
            &mut call,
        ),
        (
            ("timeout 0", conns.as_ptr(), 1, 0.0, 1),
            queue,
            out,
            &mut call,
        ),
        (
            ("timeout NaN", conns.as_ptr(), 1, f64::NAN, 1),
            queue,
            out,
            &mut call,
        ),
        (
            ("NULL queue", conns.as_ptr(), 1, 1.0, 1),
            std::ptr::null(),
            out,
            &mut call,
        ),
        (
            ("NULL out_call", conns.as_ptr(), 1, 1.0, 1),
            queue,
            out,
            std::ptr::null_mut(),
        ),
    ];
    for ((what, conns, count, timeout, most), queue, out, out_call) in cases {
        // SAFETY: each pointer NULL or valid for what it is given as.
        let status = unsafe {
            ffi::wool_idle_many_start(conns, count, timeout, most, queue, 1, out, out_call)
        };
        assert_eq!(status, wool_status::InvalidArgument, "{what}");
    }
    assert_eq!(call, 12345, "out_call is written only on success");
    assert!(completions_within(queue, 0.3).is_empty(), "nothing started");
    assert!(untouched(&results), "nothing written");
    // SAFETY: each handle freed once.
    unsafe {
        ffi::wool_queue_free(queue);
        ffi::wool_free(conn);
    }
}

/// Given a sweep of a worker that never answers (and a live one) with a 1 s deadline, when it
/// is cancelled mid-sweep, then exactly one completion arrives, WOOL_STATUS_CANCELLED with the
/// sweep's kind and count 0, the hanging poll's stream is reset (the worker's handler is
/// dropped), and the host's results are never written, also well past the sweep's deadline.
#[test]
fn a_cancelled_sweep_completes_once_and_never_writes_its_results() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (dropped_tx, dropped) = std::sync::mpsc::channel();
    let (hanging_address, server) = runtime.block_on(serve_hanging_idle(dropped_tx));
    let worker = common::WorkerProcess::plaintext();
    let hanging = connect(&hanging_address);
    let live = connect(&worker.address);
    let queue = new_queue();
    let conns = [hanging as *const wool_connection, live];
    let mut results = sentinel_results(conns.len());
    let call = start_sweep(&conns, 1.0, queue, 9, &mut results);
    // Mid-sweep: the live poll has answered, the hanging one waits (driven by a waiting thread
    // or the driver: wool_queue_next with a short timeout drives it either way).
    assert!(completions_within(queue, 0.3).is_empty(), "still sweeping");
    assert!(
        untouched(&results),
        "nothing written before the sweep's end"
    );
    // SAFETY: a live queue.
    assert_eq!(unsafe { ffi::wool_cancel(queue, call) }, wool_status::Ok);
    let completions = completions_within(queue, 0.0);
    assert_eq!(
        completions.len(),
        1,
        "the cancellation's one completion, at once"
    );
    let done = &completions[0];
    assert_eq!((done.completion.tag, done.completion.call), (9, call));
    assert_eq!(done.completion.status, wool_status::Cancelled);
    assert_eq!((done.kind, done.count), (WOOL_COMPLETION_KIND_SWEEP, 0));
    dropped
        .recv_timeout(Duration::from_secs(10))
        .expect("the hanging poll's stream was reset");
    // Past the sweep's deadline, with the runtime driven meanwhile: nothing more.
    assert!(
        completions_within(queue, 1.5).is_empty(),
        "one completion per sweep"
    );
    assert!(
        untouched(&results),
        "the results are never written after wool_cancel"
    );
    // SAFETY: a live queue; cancelling again (a done call) changes nothing.
    assert_eq!(unsafe { ffi::wool_cancel(queue, call) }, wool_status::Ok);
    assert!(completions_within(queue, 0.0).is_empty());
    // SAFETY: each handle freed once.
    unsafe {
        ffi::wool_queue_free(queue);
        ffi::wool_free(hanging);
        ffi::wool_free(live);
    }
    server.abort();
}

/// Given a sweep in flight, when its queue is freed, then its results are never written (past
/// its deadline); given another sweep whose handles are freed right after its start, then it
/// completes with every result written.
#[test]
fn a_sweep_outlives_its_handles_and_dies_with_its_queue() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (dropped_tx, _dropped) = std::sync::mpsc::channel();
    let (hanging_address, server) = runtime.block_on(serve_hanging_idle(dropped_tx));
    let worker = common::WorkerProcess::plaintext();

    let doomed = new_queue();
    let hanging = connect(&hanging_address);
    let mut lost = sentinel_results(2);
    start_sweep(&[hanging, hanging], 1.0, doomed, 1, &mut lost);
    std::thread::sleep(Duration::from_millis(200));
    // SAFETY: freed once; nothing uses it afterwards.
    unsafe { ffi::wool_queue_free(doomed) };

    let queue = new_queue();
    let live = connect(&worker.address);
    let mut results = sentinel_results(3);
    start_sweep(&[live, live, live], 10.0, queue, 2, &mut results);
    // SAFETY: freed once; the sweep keeps what it needs.
    unsafe { ffi::wool_free(live) };
    let completions = completions_within(queue, 10.0);
    assert_eq!(completions.len(), 1);
    assert_eq!(completions[0].completion.status, wool_status::Ok);
    assert_eq!(completions[0].count, 3);
    for result in &results {
        assert_eq!(result.status, wool_status::Ok);
        assert!(result.seconds >= 0.0);
    }
    // The freed queue's sweep is past its deadline by now; drive the runtime a little longer.
    assert!(completions_within(queue, 1.0).is_empty());
    assert!(
        untouched(&lost),
        "a freed queue's sweep never writes its results"
    );
    // SAFETY: each handle freed once.
    unsafe {
        ffi::wool_queue_free(queue);
        ffi::wool_free(hanging);
    }
    server.abort();
}

/// Given completions waiting, when they are collected with wool_queue_next_sized, then: with
/// the 0.4 size (sizeof(wool_completion)) exactly those bytes are written per element, as
/// wool_queue_next writes them; with the full size the kind (IDLE) and count (0) follow; with a
/// bigger size (and one that is no multiple of 8: unaligned elements) the tail is zeroed; a
/// size below sizeof(wool_completion), an overflowing total and a NULL array are refused
/// with WOOL_STATUS_INVALID_ARGUMENT and collect nothing.
#[test]
fn completions_are_collected_at_any_size_from_0_4s_up() {
    let worker = common::WorkerProcess::plaintext();
    let live = connect(&worker.address);
    let queue = new_queue();
    let old = std::mem::size_of::<wool_completion>();
    let full = std::mem::size_of::<wool_completion_ex>();
    assert_eq!((old, full), (288, 304));
    for size in [old, full, full + 40, full + 13] {
        let mut call = 0;
        // SAFETY: live handles and a writable out-pointer.
        let status = unsafe { ffi::wool_idle_start(live, queue, 10.0, size as u64, &mut call) };
        assert_eq!(status, wool_status::Ok);
        // Two elements' room plus a guard; one completion expected.
        let mut buffer = vec![SENTINEL; 2 * size + 16];
        let mut count = 0;
        // SAFETY: a buffer of 2 elements of `size` bytes (and more).
        let status = unsafe {
            ffi::wool_queue_next_sized(queue, buffer.as_mut_ptr().cast(), 2, size, 10.0, &mut count)
        };
        assert_eq!(status, wool_status::Ok);
        assert_eq!(count, 1, "size {size}");
        // SAFETY: at least 288 bytes, read unaligned.
        let head: wool_completion =
            unsafe { buffer.as_ptr().cast::<wool_completion>().read_unaligned() };
        assert_eq!((head.tag, head.call), (size as u64, call), "size {size}");
        assert_eq!(head.status, wool_status::Ok);
        assert!(head.seconds >= 0.0);
        if size >= full {
            // SAFETY: at least 304 bytes, read unaligned.
            let ex: wool_completion_ex = unsafe {
                buffer
                    .as_ptr()
                    .cast::<wool_completion_ex>()
                    .read_unaligned()
            };
            assert_eq!(
                (ex.kind, ex.reserved, ex.count),
                (WOOL_COMPLETION_KIND_IDLE, 0, 0)
            );
            assert!(
                buffer[full..size].iter().all(|&b| b == 0),
                "size {size}: tail zeroed"
            );
        }
        assert!(
            buffer[size..].iter().all(|&b| b == SENTINEL),
            "size {size}: nothing beyond the one element written"
        );
    }
    let mut call = 0;
    // SAFETY: as above.
    assert_eq!(
        unsafe { ffi::wool_idle_start(live, queue, 10.0, 1, &mut call) },
        wool_status::Ok
    );
    std::thread::sleep(Duration::from_millis(300));
    let mut buffer = vec![0u8; 4 * full];
    let mut count = 99;
    for (what, out, capacity, size) in [
        ("too small", buffer.as_mut_ptr(), 1, old - 1),
        ("zero", buffer.as_mut_ptr(), 1, 0),
        ("overflow", buffer.as_mut_ptr(), usize::MAX / 2, full),
        ("NULL out", std::ptr::null_mut(), 1, full),
    ] {
        // SAFETY: refused before anything is written.
        let status = unsafe {
            ffi::wool_queue_next_sized(queue, out.cast(), capacity, size, 0.0, &mut count)
        };
        assert_eq!(status, wool_status::InvalidArgument, "{what}");
    }
    assert_eq!(count, 99, "out_count is written only on success");
    // The completion is still there, for wool_queue_next (the 0.4 call) to take.
    let mut completion = std::mem::MaybeUninit::<wool_completion>::uninit();
    // SAFETY: one writable completion.
    let status =
        unsafe { ffi::wool_queue_next(queue, completion.as_mut_ptr(), 1, 10.0, &mut count) };
    assert_eq!((status, count), (wool_status::Ok, 1));
    // SAFETY: written, as count says.
    assert_eq!(unsafe { completion.assume_init() }.call, call);
    // SAFETY: each handle freed once.
    unsafe {
        ffi::wool_queue_free(queue);
        ffi::wool_free(live);
    }
}
