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
