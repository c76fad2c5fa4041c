//! The one library-wide tokio runtime that every blocking C call runs on.
//!
//! Created on first use and never shut down (C hosts have no "unload" hook we could trust):
//! two worker threads, which is plenty for unary idle/stop calls on pooled channels.
//!
//! Two facts shape it (both are "Known pitfalls" in C-API.md):
//! - SIGPIPE is blocked on the runtime's threads. A socket write to a peer that has closed (a
//!   mutual-TLS worker rejecting our certificate does exactly that) raises SIGPIPE, and a C host
//!   that left the default disposition would die of it (exit status 141). The connection's own
//!   sockets already write with `MSG_NOSIGNAL` (`connection::transport`); the blocked signal is
//!   the second line, for any write on these threads that does not go through them: there a
//!   SIGPIPE stays pending on the thread, never delivered, and the write fails with `EPIPE`.
//! - The caller's thread never polls the future. [`block_on`] spawns it onto the runtime and
//!   waits on a plain channel: that works whether or not the caller is itself inside some tokio
//!   runtime (where `Runtime::block_on` would panic), keeps all socket I/O on the threads where
//!   SIGPIPE is blocked, and gives the pooled channel the runtime context it needs.

use std::future::Future;
use std::sync::mpsc;

use once_cell::sync::OnceCell;
use tokio::runtime::Runtime;

use crate::connection::{Error, ErrorKind};

/// Worker threads of the library's runtime.
const WORKER_THREADS: usize = 2;

/// The runtime and the process that created it: a child made by `fork()` inherits the
/// runtime's memory but not its threads, so a call there would wait forever.
struct LibraryRuntime {
    runtime: Runtime,
    process: u32,
}

static RUNTIME: OnceCell<LibraryRuntime> = OnceCell::new();

/// The library's runtime, created on first use.
///
/// Errors: [`ErrorKind::Transient`] when the runtime's threads cannot be started (the process
/// is out of threads or memory; a later call tries again); [`ErrorKind::InvalidArgument`] in a
/// child process forked after the runtime started (its threads did not survive the fork).
pub(crate) fn runtime() -> Result<&'static Runtime, Error> {
    let library = RUNTIME.get_or_try_init(|| {
        Ok::<_, Error>(LibraryRuntime {
            runtime: build()?,
            process: std::process::id(),
        })
    })?;
    if library.process != std::process::id() {
        return Err(Error::invalid_argument(format!(
            "libwool was first used in process {} and this process was forked from it: the \
             library's runtime threads did not survive fork(); use libwool in a child only \
             if the parent had not used it yet",
            library.process
        )));
    }
    Ok(&library.runtime)
}

fn build() -> Result<Runtime, Error> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(WORKER_THREADS)
        .thread_name("wool-runtime")
        .on_thread_start(block_sigpipe)
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
    RUNTIME
        .get()
        .filter(|library| library.process == std::process::id())
        .map(|library| &library.runtime)
}

/// Runs `future` to completion on the library's runtime and blocks the calling thread until it
/// is done. Safe from any thread, including one running inside another tokio runtime.
///
/// Panics (caught by the FFI boundary) if the future panicked.
pub(crate) fn block_on<F>(future: F) -> Result<F::Output, Error>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let (answer, answered) = mpsc::sync_channel(1);
    runtime()?.spawn(async move {
        let _ = answer.send(future.await);
    });
    // The sender is dropped unanswered only when the task panicked (tokio caught it).
    Ok(answered
        .recv()
        .expect("the library's runtime task panicked before answering"))
}

/// Blocks SIGPIPE on the calling thread (see the module docs).
fn block_sigpipe() {
    // SAFETY: plain libc calls on a local, zero-initialised signal set.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGPIPE);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtime_threads_block_sigpipe() {
        let blocked = block_on(async {
            // SAFETY: reads this thread's signal mask into a local set.
            unsafe {
                let mut set: libc::sigset_t = std::mem::zeroed();
                libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut set);
                libc::sigismember(&set, libc::SIGPIPE) == 1
            }
        })
        .unwrap();
        assert!(blocked);
    }

    #[test]
    fn block_on_works_inside_another_runtime() {
        let outer = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let answer = outer.block_on(async { block_on(async { 42 }).unwrap() });
        assert_eq!(answer, 42);
    }
}
