//! The one library-wide tokio runtime that every blocking C call runs on.
//!
//! Created on first use and never shut down (C hosts have no "unload" hook we could trust).
//! It is a *current-thread* runtime driven by the callers themselves: a blocking call runs
//! `Runtime::block_on` on the caller's own thread, which then does the socket I/O, runs the
//! channel's tasks and waits in `epoll` for the answer. A poll therefore costs no hand-off to
//! another thread and back (each a futex wake and a context switch, several microseconds on a
//! loopback round trip of tens). Several threads may block at once: the first drives the
//! runtime, the others park until their answers are written for them (one `unpark` each, by
//! whichever thread drives), and when the first returns while others are parked the library's
//! driver thread drives for them: the driving does not move from waiter to waiter.
//! Between calls a housekeeping thread gives the runtime a few turns once a second (answering
//! HTTP/2 PINGs, hanging up on a worker that is shutting down, evicting unused channels).
//!
//! Started calls (`wool_*_start`) run on the same runtime, and whoever waits drives them: a
//! thread blocked in `wool_queue_next` (or in a blocking call) runs the runtime itself, so a
//! started call's I/O, its completion and the host's read of it happen on one thread with no
//! wake-up in between. The library's driver thread runs started calls only while no host
//! thread is in the library: for hosts that wait on the queue's descriptor in their own event
//! loop, or that do other work between starting and collecting. It steps aside whenever a host
//! thread enters to drive.
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
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use tokio::runtime::Runtime;

use libwool::connection::{Error, ErrorKind};
use libwool::process::PerProcess;

/// The runtime of this process, the host threads driving it (blocking calls and waits in
/// `wool_queue_next`: while there is one, the driver thread and the housekeeper stay out of its
/// way), and the driver of started calls.
struct LibraryRuntime {
    runtime: std::mem::ManuallyDrop<Runtime>,
    hosts_driving: AtomicUsize,
    /// Host threads parked in a blocking call until its answer is written for them (see
    /// [`block_on_call`]): while there is one and no host thread drives, the driver thread
    /// drives.
    hosts_parked: AtomicUsize,
    /// Where parked host threads put their calls: a task on the runtime spawns them from
    /// inside it (see [`spawn_parked_calls`]).
    parked_calls: tokio::sync::mpsc::UnboundedSender<ParkedCall>,
    /// Host threads that have entered to drive, ever: the driver ticking sees from it whether a
    /// host came and went since its last tick.
    host_entries: AtomicUsize,
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

/// Drives the runtime while calls started without blocking (`wool_*_start`), or the calls of
/// host threads parked in a blocking call, are in flight and no host thread is in the library
/// to drive them: a thread of the library, started with the first such call, that sleeps
/// otherwise. A host thread that enters the library to wait (a blocking call, `wool_queue_next`)
/// takes the runtime over: the driver steps aside, and comes back once a whole [`DRIVER_TICK`]
/// has passed with no host thread entering (the host leaving does not wake it: a host looping
/// over `wool_queue_next` would otherwise hand the runtime over and take it back on every
/// turn), or at once when the last host thread driving leaves while others are parked.
struct Driver {
    /// Started calls not yet finished (their futures not yet dropped).
    in_flight: AtomicUsize,
    /// Set once a host has asked for a queue's descriptor (`wool_queue_fd`): such a host may
    /// wait in its own loop right after starting a call, so a start wakes a ticking driver at
    /// once instead of leaving it to its next tick.
    descriptor_watched: AtomicBool,
    /// Whether the driver thread is inside the runtime now (so a host arriving must tell it to
    /// step aside).
    driving: AtomicBool,
    /// How the driver thread waits, and the condition variable it waits on.
    sleep: std::sync::Mutex<Sleep>,
    wake: std::sync::Condvar,
    /// Tells the driving loop to look again: the last started call finished, or a host thread
    /// arrived to drive.
    step_aside: tokio::sync::Notify,
    started: std::sync::Once,
}

/// How the driver thread is waiting.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Sleep {
    /// Driving, or about to.
    Awake,
    /// Looking again every [`DRIVER_TICK`]: calls are in flight while a host drives, or were
    /// until less than [`DRIVER_LINGER_TICKS`] ticks ago.
    Ticking,
    /// Until a call is started.
    Asleep,
}

/// How often a ticking driver looks again.
const DRIVER_TICK: Duration = Duration::from_millis(1);

/// Ticks with no call in flight before the driver sleeps until the next start: a host starting
/// calls one after another then never pays a wake-up per start.
const DRIVER_LINGER_TICKS: u32 = 8;

static RUNTIME: PerProcess<LibraryRuntime> = PerProcess::new();

/// The library's runtime in this process, created on first use (in a forked child: the
/// child's own).
///
/// Errors: [`ErrorKind::Transient`] when the runtime cannot be started (the process is out of
/// file descriptors or memory; a later call tries again).
fn library() -> Result<&'static LibraryRuntime, Error> {
    RUNTIME.get_or_try_init(
        || {
            let runtime = build()?;
            let (parked_calls, calls) = tokio::sync::mpsc::unbounded_channel();
            runtime.spawn(spawn_parked_calls(calls));
            Ok(LibraryRuntime {
                runtime: std::mem::ManuallyDrop::new(runtime),
                hosts_driving: AtomicUsize::new(0),
                hosts_parked: AtomicUsize::new(0),
                parked_calls,
                host_entries: AtomicUsize::new(0),
                driver: Driver {
                    in_flight: AtomicUsize::new(0),
                    descriptor_watched: AtomicBool::new(false),
                    driving: AtomicBool::new(false),
                    sleep: std::sync::Mutex::new(Sleep::Awake),
                    wake: std::sync::Condvar::new(),
                    step_aside: tokio::sync::Notify::new(),
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
    let _host = HostDriving::begin(library);
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

/// As [`block_on`], for a call whose future owns what it uses (a poll, a stop). When no thread
/// drives the runtime, the calling thread drives it for its own call (the sequential path: no
/// hand-off). Otherwise the call is spawned onto the runtime, so that only the thread driving
/// touches the connection's HTTP/2 state (polled from many waiting threads, its lock and
/// wake-ups are contended), and this thread parks until the call's answer is written for it:
/// whoever drives completes the calls of every parked thread in the same turns, waking each
/// with one `unpark` (at most one futex wake), and the driving never moves between the waiting
/// threads. While threads are parked and no host thread drives, the library's driver thread
/// drives for them (see [`Driver`]).
pub(crate) fn block_on_call<F>(future: F) -> Result<F::Output, Error>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let library = library()?;
    if tokio::runtime::Handle::try_current().is_ok() {
        return block_on(future);
    }
    if library.nobody_drives() {
        return block_on(future);
    }
    let _parked = HostParked::begin(library);
    let answer = Arc::new(Answer::new());
    let written = Arc::clone(&answer);
    spawn_parked_call(
        library,
        Box::pin(async move { written.write(AssertUnwindSafe(future).catch_unwind().await) }),
    );
    match answer.wait(library) {
        Ok(output) => Ok(output),
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

/// The answer to a call made by a parked host thread: written by the task that ran the call,
/// taken by the thread that made it.
struct Answer<T> {
    output: std::sync::Mutex<Option<std::thread::Result<T>>>,
    /// The host thread waiting for the answer.
    waiter: std::thread::Thread,
    /// For a waiter that drives the runtime itself (no other thread drives): woken as a task.
    written: tokio::sync::Notify,
}

/// How long a parked host thread sleeps before it looks whether any thread drives the runtime:
/// a wake-up of the driver lost to a race, or a driver thread that could not be started, costs
/// at most this long.
const PARKED_CHECK: Duration = Duration::from_millis(50);

impl<T> Answer<T> {
    fn new() -> Self {
        Self {
            output: std::sync::Mutex::new(None),
            waiter: std::thread::current(),
            written: tokio::sync::Notify::new(),
        }
    }

    /// Writes the answer and wakes its waiter: an unpark if it is parked (one futex wake), a
    /// permit if it drives.
    fn write(&self, output: std::thread::Result<T>) {
        *self.lock() = Some(output);
        self.written.notify_one();
        self.waiter.unpark();
    }

    fn take(&self) -> Option<std::thread::Result<T>> {
        self.lock().take()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<std::thread::Result<T>>> {
        self.output
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Parks the calling thread (the waiter) until the answer is written. A thread that wakes
    /// to find no thread driving drives the runtime itself until its answer comes.
    fn wait(&self, library: &'static LibraryRuntime) -> std::thread::Result<T> {
        loop {
            if let Some(output) = self.take() {
                return output;
            }
            std::thread::park_timeout(PARKED_CHECK);
            if let Some(output) = self.take() {
                return output;
            }
            if library.hosts_driving.load(Ordering::SeqCst) == 0
                && !library.driver.driving.load(Ordering::SeqCst)
            {
                let _host = HostDriving::begin(library);
                library.runtime.block_on(self.written.notified());
            }
        }
    }
}

/// The call of a parked host thread, on its way to the runtime.
type ParkedCall = std::pin::Pin<Box<dyn Future<Output = ()> + Send>>;

/// Spawns the calls of parked host threads from inside the runtime. A spawn from outside it
/// wakes the runtime's driver each time (an eventfd write a call); through this channel the
/// many threads that park at once wake it once for all the calls it finds waiting.
async fn spawn_parked_calls(mut calls: tokio::sync::mpsc::UnboundedReceiver<ParkedCall>) {
    while let Some(call) = calls.recv().await {
        tokio::spawn(call);
    }
}

/// Hands a parked host thread's call to the runtime, counted in the driver's in-flight calls
/// as a started call is, and wakes the driver at once if no host thread drives.
fn spawn_parked_call(library: &'static LibraryRuntime, call: ParkedCall) {
    let driver = &library.driver;
    driver.in_flight.fetch_add(1, Ordering::SeqCst);
    let counted = StartedCall(driver);
    let call: ParkedCall = Box::pin(async move {
        let _counted = counted;
        call.await
    });
    if let Err(refused) = library.parked_calls.send(call) {
        // The spawning task never ends while the runtime lives; spawn directly if it did.
        library.runtime.spawn(refused.0);
    }
    driver.started.call_once(|| start_driver(library));
    if library.hosts_driving.load(Ordering::SeqCst) == 0 {
        driver.wake_unless_awake(true);
    }
}

/// Spawns `future` as a started call (counted in the driver's in-flight calls) and wakes the
/// driver if no host thread drives: at once if it sleeps until a start or the host waits on a
/// descriptor, else it comes on its next tick.
fn spawn_task<F>(library: &'static LibraryRuntime, future: F) -> tokio::task::JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let driver = &library.driver;
    driver.in_flight.fetch_add(1, Ordering::SeqCst);
    let counted = StartedCall(driver);
    let task = library.runtime.spawn(async move {
        let _counted = counted;
        future.await
    });
    driver.started.call_once(|| start_driver(library));
    if library.hosts_driving.load(Ordering::SeqCst) == 0 {
        driver.wake_unless_awake(driver.descriptor_watched.load(Ordering::Relaxed));
    }
    task
}

/// Starts `future` on the library's runtime without blocking. It runs on whichever thread
/// drives the runtime: a host thread in a blocking call or in `wool_queue_next`, or else the
/// driver thread (see [`Driver`]). Returns the task's abort handle: aborting drops the future
/// (an RPC's HTTP/2 stream is then reset).
///
/// Errors: as [`block_on`]'s runtime start.
pub(crate) fn spawn<F>(future: F) -> Result<tokio::task::AbortHandle, Error>
where
    F: Future<Output = ()> + Send + 'static,
{
    let library = library()?;
    Ok(spawn_task(library, future).abort_handle())
}

/// Starts each of `calls` on the library's runtime without blocking, as [`spawn`] does one,
/// sharing what a start costs across the batch: one runtime lookup, one task handed to the
/// runtime from this thread (it spawns the calls from inside the runtime, where a spawn is a
/// push onto the local run queue rather than a remote wake) and at most one driver wake.
/// `record` receives the calls' abort handles, in the order of `calls`, on the runtime's
/// thread, before any of the calls has run.
///
/// Errors: as [`block_on`]'s runtime start; nothing is started then.
pub(crate) fn spawn_batch<F, R>(calls: Vec<F>, record: R) -> Result<(), Error>
where
    F: Future<Output = ()> + Send + 'static,
    R: FnOnce(Vec<tokio::task::AbortHandle>) + Send + 'static,
{
    let library = library()?;
    let driver = &library.driver;
    driver.in_flight.fetch_add(calls.len(), Ordering::SeqCst);
    // Counted from now, so that the driver does not go to sleep between this start and the
    // calls' spawns; a count drops with its call's future.
    let counted: Vec<(StartedCall, F)> = calls
        .into_iter()
        .map(|call| (StartedCall(driver), call))
        .collect();
    library.runtime.spawn(async move {
        let tasks = counted
            .into_iter()
            .map(|(counted, call)| {
                tokio::spawn(async move {
                    let _counted = counted;
                    call.await
                })
                .abort_handle()
            })
            .collect();
        record(tasks);
    });
    driver.started.call_once(|| start_driver(library));
    if library.hosts_driving.load(Ordering::SeqCst) == 0 {
        driver.wake_unless_awake(driver.descriptor_watched.load(Ordering::Relaxed));
    }
    Ok(())
}

/// Notes that a host waits on a queue's descriptor in its own loop (see
/// [`Driver::descriptor_watched`]).
///
/// Errors: as [`block_on`]'s runtime start.
pub(crate) fn descriptor_watched() -> Result<(), Error> {
    library()?
        .driver
        .descriptor_watched
        .store(true, Ordering::Relaxed);
    Ok(())
}

/// Drives the runtime on the calling thread until `done` resolves (a wait in
/// `wool_queue_next`), counting as a host thread driving. `None` when the caller is inside
/// another tokio runtime, where it cannot drive: it must wait by other means.
///
/// Errors: as [`block_on`]'s runtime start.
pub(crate) fn drive_until<F: Future>(done: F) -> Result<Option<F::Output>, Error> {
    if tokio::runtime::Handle::try_current().is_ok() {
        return Ok(None);
    }
    let library = library()?;
    let _host = HostDriving::begin(library);
    Ok(Some(library.runtime.block_on(done)))
}

/// A few turns of the runtime: each yield lets it poll its I/O driver and timers and run the
/// tasks they wake.
async fn turns() {
    for _ in 0..4 {
        tokio::task::yield_now().await;
    }
}

impl Driver {
    /// Wakes the driver thread if it sleeps until a start, or (`urgent`) if it ticks.
    fn wake_unless_awake(&self, urgent: bool) {
        let mut sleep = self.lock_sleep();
        if *sleep == Sleep::Asleep || (urgent && *sleep == Sleep::Ticking) {
            *sleep = Sleep::Awake;
            self.wake.notify_one();
        }
    }

    fn lock_sleep(&self) -> std::sync::MutexGuard<'_, Sleep> {
        self.sleep
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Counts one started call until its future is dropped (finished or aborted).
struct StartedCall(&'static Driver);

impl Drop for StartedCall {
    fn drop(&mut self) {
        if self.0.in_flight.fetch_sub(1, Ordering::AcqRel) == 1
            && self.0.driving.load(Ordering::Acquire)
        {
            self.0.step_aside.notify_one();
        }
    }
}

/// The driver thread: drives the runtime while started calls are in flight and no host thread
/// drives it; ticks while a host drives or calls were in flight moments ago; sleeps otherwise.
fn start_driver(library: &'static LibraryRuntime) {
    let driver = &library.driver;
    let hosts = &library.hosts_driving;
    let wanted =
        move || driver.in_flight.load(Ordering::SeqCst) > 0 && hosts.load(Ordering::SeqCst) == 0;
    let started = std::thread::Builder::new()
        .name("wool-driver".into())
        .spawn(move || loop {
            {
                let mut sleep = driver.lock_sleep();
                let mut quiet_ticks = 0;
                let mut entries_seen = library.host_entries.load(Ordering::SeqCst);
                loop {
                    // Woken by a start (or just started), the driver drives at once; on a tick,
                    // only if no host thread entered since the last one: a host looping over
                    // wool_queue_next is outside the library between its turns, and is not to
                    // have the runtime taken from under it then.
                    let entries = library.host_entries.load(Ordering::SeqCst);
                    let woken = *sleep == Sleep::Awake;
                    if wanted() && (woken || entries == entries_seen) {
                        break;
                    }
                    entries_seen = entries;
                    if driver.in_flight.load(Ordering::SeqCst) > 0 {
                        quiet_ticks = 0;
                    } else {
                        quiet_ticks += 1;
                    }
                    sleep = if quiet_ticks > DRIVER_LINGER_TICKS {
                        *sleep = Sleep::Asleep;
                        driver
                            .wake
                            .wait_while(sleep, |sleep| *sleep == Sleep::Asleep)
                            .unwrap_or_else(|poisoned| poisoned.into_inner())
                    } else {
                        *sleep = Sleep::Ticking;
                        driver
                            .wake
                            .wait_timeout(sleep, DRIVER_TICK)
                            .unwrap_or_else(|poisoned| poisoned.into_inner())
                            .0
                    };
                }
                *sleep = Sleep::Awake;
            }
            driver.driving.store(true, Ordering::SeqCst);
            library.runtime.block_on(async {
                while wanted() {
                    // A bounded wait: a wake-up lost to a race costs at most this long.
                    let _ = tokio::time::timeout(
                        Duration::from_millis(100),
                        driver.step_aside.notified(),
                    )
                    .await;
                }
            });
            driver.driving.store(false, Ordering::SeqCst);
        });
    if let Err(error) = started {
        tracing::error!("libwool: cannot start the driver thread ({error}); started calls wait for the next blocking call, wool_queue_next or housekeeping turn");
    }
}

/// Counts one host thread driving the runtime for as long as it lives (a panic included), and
/// tells the driver thread to step aside when it is the first.
struct HostDriving(&'static LibraryRuntime);

impl HostDriving {
    fn begin(library: &'static LibraryRuntime) -> Self {
        library.host_entries.fetch_add(1, Ordering::SeqCst);
        if library.hosts_driving.fetch_add(1, Ordering::SeqCst) == 0
            && library.driver.driving.load(Ordering::SeqCst)
        {
            library.driver.step_aside.notify_one();
        }
        HostDriving(library)
    }
}

impl Drop for HostDriving {
    /// The last host thread to leave hands the driving to the driver thread at once if host
    /// threads are parked waiting for their answers.
    fn drop(&mut self) {
        if self.0.hosts_driving.fetch_sub(1, Ordering::SeqCst) == 1
            && self.0.hosts_parked.load(Ordering::SeqCst) > 0
        {
            self.0.driver.wake_unless_awake(true);
        }
    }
}

/// Counts one host thread parked in [`block_on_call`] for as long as it lives (a panic
/// included).
struct HostParked(&'static LibraryRuntime);

impl HostParked {
    fn begin(library: &'static LibraryRuntime) -> Self {
        library.hosts_parked.fetch_add(1, Ordering::SeqCst);
        HostParked(library)
    }
}

impl Drop for HostParked {
    fn drop(&mut self) {
        self.0.hosts_parked.fetch_sub(1, Ordering::SeqCst);
    }
}

impl LibraryRuntime {
    /// Whether no thread drives the runtime or waits for it to be driven: a blocking call then
    /// drives it itself.
    fn nobody_drives(&self) -> bool {
        self.hosts_driving.load(Ordering::SeqCst) == 0
            && !self.driver.driving.load(Ordering::SeqCst)
            && self.hosts_parked.load(Ordering::SeqCst) == 0
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
            if library.hosts_driving.load(Ordering::Relaxed) == 0
                && !library.driver.driving.load(Ordering::Relaxed)
            {
                // A connection task reading a GOAWAY, then closing, a started call's answer.
                library.runtime.block_on(turns());
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
    fn a_host_thread_waiting_runs_started_calls_itself() {
        // The started call outlives the host's entry into the wait: from then on it runs on the
        // waiting thread, the driver thread having stepped aside.
        // (Other tests of this process may be host threads in the library at that moment too:
        // any host thread may run it, never the driver.)
        let (ran_on_tx, ran_on) = tokio::sync::oneshot::channel();
        spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            let _ = ran_on_tx.send(std::thread::current().name().map(str::to_owned));
        })
        .unwrap();
        let ran_on = drive_until(ran_on)
            .unwrap()
            .expect("not inside a runtime")
            .unwrap();
        assert_ne!(ran_on.as_deref(), Some("wool-driver"));
    }

    /// Starts a host thread driving the runtime until the sender is used; returns once it
    /// drives.
    fn host_driving() -> (
        tokio::sync::oneshot::Sender<()>,
        std::thread::JoinHandle<Option<Result<(), tokio::sync::oneshot::error::RecvError>>>,
    ) {
        let (release_tx, release) = tokio::sync::oneshot::channel::<()>();
        let host = std::thread::spawn(move || drive_until(release).unwrap());
        while library().unwrap().hosts_driving.load(Ordering::SeqCst) == 0 {
            std::thread::yield_now();
        }
        (release_tx, host)
    }

    /// Runs `body` while a host thread is in the library driving, so that blocking calls made
    /// meanwhile take the path of many callers at once.
    fn while_a_host_drives<T>(body: impl FnOnce() -> T) -> T {
        let (release_tx, host) = host_driving();
        let output = body();
        release_tx.send(()).unwrap();
        host.join().unwrap();
        output
    }

    #[test]
    fn many_threads_blocking_at_once_each_get_their_own_answer() {
        let answers = while_a_host_drives(|| {
            let callers: Vec<_> = (0..64)
                .map(|caller| {
                    std::thread::spawn(move || {
                        block_on_call(async move {
                            tokio::time::sleep(Duration::from_millis(5)).await;
                            caller
                        })
                        .unwrap()
                    })
                })
                .collect();
            callers
                .into_iter()
                .map(|caller| caller.join().unwrap())
                .collect::<Vec<_>>()
        });
        // Each caller is parked while the host drives: its call runs on the host's thread and
        // its own answer is written for it.
        assert_eq!(answers, (0..64).collect::<Vec<_>>());
    }

    #[test]
    fn parked_callers_are_answered_after_the_driving_host_leaves() {
        // The host drives while 16 callers park, and leaves before their calls end: the driver
        // thread (or a parked caller that finds nobody driving) drives them to their answers.
        let (release_tx, host) = host_driving();
        let library = library().unwrap();
        let callers: Vec<_> = (0..16)
            .map(|caller| {
                std::thread::spawn(move || {
                    block_on_call(async move {
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        caller
                    })
                    .unwrap()
                })
            })
            .collect();
        while library.hosts_parked.load(Ordering::SeqCst) < 16 {
            std::thread::yield_now();
        }
        release_tx.send(()).unwrap();
        host.join().unwrap();
        let answers: Vec<_> = callers.into_iter().map(|c| c.join().unwrap()).collect();
        assert_eq!(answers, (0..16).collect::<Vec<_>>());
    }

    #[test]
    fn a_panic_in_a_call_among_many_resumes_on_its_caller() {
        let outcome = while_a_host_drives(|| {
            std::thread::spawn(|| {
                std::panic::catch_unwind(|| block_on_call(async { panic!("inside the call") }))
            })
            .join()
            .unwrap()
        });
        let panic = outcome.expect_err("the panic reaches the caller");
        assert_eq!(panic.downcast_ref::<&str>(), Some(&"inside the call"));
    }

    #[test]
    fn started_calls_run_while_no_host_thread_waits() {
        let (ran_on_tx, ran_on) = std::sync::mpsc::channel();
        spawn(async move {
            tokio::time::sleep(Duration::from_millis(10)).await;
            let _ = ran_on_tx.send(std::thread::current().name().map(str::to_owned));
        })
        .unwrap();
        // This thread never enters the library: the call runs all the same (on the driver, or
        // on another test's thread that happens to be in the library then).
        let ran_on = ran_on.recv_timeout(Duration::from_secs(10)).unwrap();
        assert_ne!(ran_on, std::thread::current().name().map(str::to_owned));
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
