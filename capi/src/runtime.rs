//! The one library-wide tokio runtime that every blocking C call runs on.
//!
//! Created on first use and never shut down (C hosts have no "unload" hook we could trust).
//! It is a *current-thread* runtime driven by the callers themselves: a blocking call runs
//! `Runtime::block_on` on the caller's own thread, which then does the socket I/O, runs the
//! channel's tasks and waits in `epoll` for the answer. A poll therefore costs no hand-off to
//! another thread and back (each a futex wake and a context switch, several microseconds on a
//! loopback round trip of tens). Several threads may block at once: one drives the runtime for
//! all, the others wait for their own answers (tokio hands the driver's role on when it returns).
//! Between calls a housekeeping thread gives the runtime a few turns once a second (answering
//! HTTP/2 PINGs, hanging up on a worker that is shutting down, evicting unused channels).
//!
//! Three facts shape it (all are "Known pitfalls" in C-API.md):
//! - SIGPIPE: the caller's thread does socket writes, and a write to a peer that has closed
//!   raises SIGPIPE, which kills a C host that kept the default disposition. The client's
//!   sockets write with `MSG_NOSIGNAL` (see `connection::transport`), so no thread ever gets it.
//! - `Runtime::block_on` panics on a thread that is already inside a tokio runtime (a Rust host,
//!   or a callback). Such a caller hands the call to a short-lived helper thread that drives the
//!   runtime and waits for it; only this rare case pays the extra hop.
//! - `fork()`: a child inherits the runtime's memory but not its threads, and shares its epoll
//!   instance and sockets with the parent. The runtime is therefore per process (see
//!   `libwool::process`): a child's first call builds a runtime (and a pool) of its own and
//!   redials; the parent's are never touched there.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::runtime::Runtime;

use libwool::connection::{Error, ErrorKind};
use libwool::process::PerProcess;

/// The runtime of this process, its blocking calls in progress (while there is one, it drives
/// the runtime and the housekeeper stays out of its way), and the driver of started calls.
struct LibraryRuntime {
    runtime: std::mem::ManuallyDrop<Runtime>,
    active_calls: AtomicUsize,
    driver: Driver,
}

/// Only a runtime that lost the race to be this process's is ever dropped, on the thread that
/// made it, which may be inside a host's own tokio runtime: there a plain drop would panic
/// ("Cannot drop a runtime in a context where blocking is not allowed"), so it is shut down
/// without waiting (it never ran a task).
impl Drop for LibraryRuntime {
    fn drop(&mut self) {
        // SAFETY: dropped once, here; nothing uses the field afterwards.
        let runtime = unsafe { std::mem::ManuallyDrop::take(&mut self.runtime) };
        runtime.shutdown_background();
    }
}

/// Drives the runtime while calls started without blocking (`wool_*_start`, a completion
/// queue) are in flight: a thread of the library, started on first use, that sleeps while
/// there are none. No host thread waits in the library for those calls (a host may be waiting
/// on the queue's descriptor in its own event loop), so this thread does their I/O. Blocking
/// calls made meanwhile still run their own futures on their callers' threads; the driver does
/// the socket I/O for all.
struct Driver {
    /// Started calls not yet finished (their futures not yet dropped).
    in_flight: AtomicUsize,
    /// Wakes the driver thread when calls are started while it sleeps.
    wake: std::sync::Condvar,
    sleeping: std::sync::Mutex<bool>,
    /// Tells the driving loop that the last started call finished.
    drained: tokio::sync::Notify,
    started: std::sync::Once,
}

static RUNTIME: PerProcess<LibraryRuntime> = PerProcess::new();

/// The library's runtime in this process, created on first use (in a forked child: the
/// child's own).
///
/// Errors: [`ErrorKind::Transient`] when the runtime cannot be started (the process is out of
/// file descriptors or memory; a later call tries again).
fn library() -> Result<&'static LibraryRuntime, Error> {
    RUNTIME.get_or_try_init(
        || {
            Ok(LibraryRuntime {
                runtime: std::mem::ManuallyDrop::new(build()?),
                active_calls: AtomicUsize::new(0),
                driver: Driver {
                    in_flight: AtomicUsize::new(0),
                    wake: std::sync::Condvar::new(),
                    sleeping: std::sync::Mutex::new(false),
                    drained: tokio::sync::Notify::new(),
                    started: std::sync::Once::new(),
                },
            })
        },
        |_| start_housekeeper(),
    )
}

fn build() -> Result<Runtime, Error> {
    tokio::runtime::Builder::new_current_thread()
        .thread_name("wool-blocking")
        .enable_all()
        .build()
        .map_err(|e| {
            Error::new(
                ErrorKind::Transient,
                Some(tonic::Code::ResourceExhausted),
                format!("cannot start the library's runtime: {e}"),
            )
        })
}

/// The runtime, only if a call in this process has already created it.
pub(crate) fn existing_runtime() -> Option<&'static Runtime> {
    RUNTIME.get().map(|library| &*library.runtime)
}

/// Runs `future` to completion on the library's runtime, blocking the calling thread until it
/// is done (see the module docs). Safe from any thread, including one running inside another
/// tokio runtime. A panic in `future` resumes on the caller's thread, for the FFI boundary.
pub(crate) fn block_on<F>(future: F) -> Result<F::Output, Error>
where
    F: Future + Send,
    F::Output: Send,
{
    let library = library()?;
    let runtime = &library.runtime;
    let _active = ActiveCall::begin(&library.active_calls);
    if tokio::runtime::Handle::try_current().is_err() {
        return Ok(runtime.block_on(future));
    }
    std::thread::scope(|scope| {
        let driver = std::thread::Builder::new()
            .name("wool-call".into())
            .spawn_scoped(scope, || runtime.block_on(future))
            .map_err(|e| {
                Error::new(
                    ErrorKind::Transient,
                    Some(tonic::Code::ResourceExhausted),
                    format!("cannot start a thread for a call made inside a tokio runtime: {e}"),
                )
            })?;
        Ok(driver
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic)))
    })
}

/// Starts `future` on the library's runtime without blocking; the driver thread runs it (see
/// [`Driver`]). Returns the task's abort handle: aborting drops the future (an RPC's HTTP/2
/// stream is then reset).
///
/// Errors: as [`block_on`]'s runtime start.
pub(crate) fn spawn<F>(future: F) -> Result<tokio::task::AbortHandle, Error>
where
    F: Future<Output = ()> + Send + 'static,
{
    let library = library()?;
    let driver = &library.driver;
    driver.in_flight.fetch_add(1, Ordering::AcqRel);
    let counted = StartedCall(driver);
    let task = library.runtime.spawn(async move {
        let _counted = counted;
        future.await;
    });
    driver.started.call_once(|| start_driver(library));
    let mut sleeping = driver
        .sleeping
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if *sleeping {
        *sleeping = false;
        driver.wake.notify_one();
    }
    Ok(task.abort_handle())
}

/// Counts one started call until its future is dropped (finished or aborted).
struct StartedCall(&'static Driver);

impl Drop for StartedCall {
    fn drop(&mut self) {
        if self.0.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.drained.notify_one();
        }
    }
}

/// The driver thread: drives the runtime while started calls are in flight, sleeps otherwise.
fn start_driver(library: &'static LibraryRuntime) {
    let driver = &library.driver;
    let started = std::thread::Builder::new()
        .name("wool-driver".into())
        .spawn(move || loop {
            library.runtime.block_on(async {
                while driver.in_flight.load(Ordering::Acquire) > 0 {
                    // A bounded wait: a wake-up lost to a race costs at most this long.
                    let _ =
                        tokio::time::timeout(Duration::from_millis(100), driver.drained.notified())
                            .await;
                }
            });
            let mut sleeping = driver
                .sleeping
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            *sleeping = true;
            while *sleeping && driver.in_flight.load(Ordering::Acquire) == 0 {
                sleeping = driver
                    .wake
                    .wait(sleeping)
                    .unwrap_or_else(|poisoned| poisoned.into_inner());
            }
            *sleeping = false;
        });
    if let Err(error) = started {
        tracing::error!("libwool: cannot start the driver thread ({error}); started calls wait for the next blocking call or housekeeping turn");
    }
}

/// Counts one blocking call for as long as it lives (a panic included).
struct ActiveCall(&'static AtomicUsize);

impl ActiveCall {
    fn begin(calls: &'static AtomicUsize) -> Self {
        calls.fetch_add(1, Ordering::Relaxed);
        ActiveCall(calls)
    }
}

impl Drop for ActiveCall {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// How often the housekeeper drives an otherwise idle runtime.
const HOUSEKEEPING_INTERVAL: Duration = Duration::from_secs(1);

/// Starts the housekeeper: a thread that, once a second while no call is driving the runtime,
/// gives it a few turns. Between a host's calls that is what sends keepalive PINGs and notices
/// unanswered ones, answers a worker's PINGs, hangs up on a worker that sent GOAWAY (a stopping
/// worker waits for its clients to leave), and evicts pool channels whose time is up. It costs
/// one wake-up a second and no work on the calls' path. If the thread cannot be started the
/// library still works, less tidily. A forked child starts its own with its own runtime.
fn start_housekeeper() {
    let started = std::thread::Builder::new()
        .name("wool-housekeeping".into())
        .spawn(|| loop {
            std::thread::sleep(HOUSEKEEPING_INTERVAL);
            let Some(library) = RUNTIME.get() else {
                continue;
            };
            if library.active_calls.load(Ordering::Relaxed) == 0 {
                // Each yield lets the runtime poll its I/O driver and timers and run the tasks
                // they wake (a connection task reading a GOAWAY, then closing).
                library.runtime.block_on(async {
                    for _ in 0..4 {
                        tokio::task::yield_now().await;
                    }
                });
            }
        });
    if let Err(error) = started {
        tracing::warn!("libwool: no housekeeping thread ({error}); idle connections are tidied on the next call");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_on_runs_on_the_calling_thread() {
        let caller = std::thread::current().id();
        assert_eq!(
            block_on(async { std::thread::current().id() }).unwrap(),
            caller
        );
    }

    #[test]
    fn block_on_works_inside_another_runtime() {
        let outer = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let answer = outer.block_on(async { block_on(async { 42 }).unwrap() });
        assert_eq!(answer, 42);
        let threaded = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        assert_eq!(
            threaded.block_on(async { block_on(async { 7 }).unwrap() }),
            7
        );
    }
}
