//! The C ABI's runtime is driven by its callers; between calls a housekeeping thread keeps idle
//! pooled connections honest. This is what lets a stopping worker finish its graceful shutdown
//! while a C host sits idle holding a connection to it.

use std::ffi::CString;
use std::time::{Duration, Instant};

use libwool::worker::{Grace, RoutineRegistry, Worker};
use wool::{self as ffi, wool_status};

#[test]
fn given_idle_c_host_holding_a_connection_when_worker_stops_then_it_hangs_up_and_the_worker_ends_gracefully(
) {
    // The worker runs on its own runtime; the C calls come from this plain thread.
    let worker_runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let worker = worker_runtime
        .block_on(
            Worker::builder()
                .routines(RoutineRegistry::default().with_reference_routines())
                .serve(),
        )
        .unwrap();
    let target = CString::new(worker.address()).unwrap();
    let mut conn = std::ptr::null_mut();
    let mut seconds = -1.0;
    unsafe {
        assert_eq!(
            ffi::wool_connect(target.as_ptr(), std::ptr::null(), &mut conn),
            wool_status::Ok
        );
        assert_eq!(ffi::wool_idle(conn, 5.0, &mut seconds), wool_status::Ok);
    }
    assert!(seconds >= 0.0);

    // Someone else stops the worker while the C host makes no call: the worker sends GOAWAY
    // and waits for its clients to hang up, forcing the rest only after 5 s.
    let begun = Instant::now();
    worker_runtime.block_on(async {
        worker.stop(Grace::None).await;
        worker.wait().await.unwrap();
    });
    let took = begun.elapsed();
    assert!(
        took < Duration::from_secs(4),
        "the idle C host's connection should be closed by the housekeeper (~1 s), not cut after 5 s: {took:?}"
    );

    // The host's next call finds the worker gone: transient, not a hang or a crash.
    unsafe {
        assert_eq!(
            ffi::wool_idle(conn, 5.0, &mut seconds),
            wool_status::Transient
        );
        ffi::wool_free(conn);
    }
}
