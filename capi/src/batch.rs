//! `wool_idle_start_batch`: many idle polls started in one call, for hosts that start calls in
//! bursts (the Go binding gathers the goroutines starting at once into one cgo crossing). The
//! work a start costs apart from its own call (the handle table's lock, the queue's lock, the
//! runtime's start and the driver's wake) is paid once per batch instead of once per call;
//! each call then runs, completes and is cancelled exactly as one from `wool_idle_start`.

use super::connection::wool_connection;
use super::handles;
use super::queue::{start_each, wool_queue, WOOL_COMPLETION_KIND_IDLE};
use super::{ffi_panic_boundary, try_timeout, wool_status};
use libwool::connection::Error;

/// Most entries one wool_idle_start_batch takes; a larger batch is refused whole (start it in
/// pieces of at most this many).
pub const WOOL_IDLE_START_BATCH_MAX: usize = 4096;

/// One idle poll for wool_idle_start_batch: what wool_idle_start takes, but the queue.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Clone, Copy)]
pub struct wool_idle_start_entry {
    /// The worker's connection handle.
    pub conn: *const wool_connection,
    /// The call's deadline in seconds, as wool_idle's: positive finite, or INFINITY for none.
    pub timeout_seconds: f64,
    /// The value the call's completion carries.
    pub tag: u64,
}

/// Starts an idle poll for each of the `count` entries of `entries` without blocking, as
/// wool_idle_start would one by one into `queue`, in one call: the handle lookups, the queue's
/// bookkeeping and the runtime's start are shared by the batch. Each entry is checked on its
/// own (its handle, its timeout): `out_statuses[i]` is WOOL_STATUS_OK for an entry whose call
/// started, or the status wool_idle_start would have returned for it (a freed handle or one of
/// another type, a bad timeout: WOOL_STATUS_INVALID_ARGUMENT). `out_calls[i]` is entry i's call
/// id either way, and every entry completes exactly once in `queue` under its tag and that id:
/// a started one when its call ends (or is cancelled with wool_cancel), a refused one at once,
/// its completion carrying the status and the message wool_idle_start would have given. So a
/// host may collect without looking at `out_statuses`. The first refused entry's failure is
/// also the thread's last error (named by its index, e.g. `entries[3].conn: connection handle
/// already freed`), though the function returns WOOL_STATUS_OK.
///
/// `count` 0 starts nothing (the arrays may then be NULL).
///
/// Returns WOOL_STATUS_INVALID_ARGUMENT, with nothing started, nothing completed and nothing
/// written, for a NULL `queue`, a freed queue or a handle of another type, a NULL `entries`,
/// `out_calls` or `out_statuses` with a non-zero `count`, or a `count` above
/// WOOL_IDLE_START_BATCH_MAX; WOOL_STATUS_TRANSIENT when the library's runtime cannot start.
///
/// # Safety
/// `entries` must be NULL or `count` readable entries; `out_calls` and `out_statuses` NULL or
/// `count` writable elements each.
#[no_mangle]
pub unsafe extern "C" fn wool_idle_start_batch(
    queue: *const wool_queue,
    entries: *const wool_idle_start_entry,
    count: usize,
    out_calls: *mut u64,
    out_statuses: *mut wool_status,
) -> wool_status {
    const FUNCTION: &str = "wool_idle_start_batch";
    ffi_panic_boundary!(FUNCTION, {
        let queue = handles::get(queue, "queue")?;
        if count > WOOL_IDLE_START_BATCH_MAX {
            return Err(Error::invalid_argument(format!(
                "count ({count}) is above WOOL_IDLE_START_BATCH_MAX ({WOOL_IDLE_START_BATCH_MAX})"
            )));
        }
        if count == 0 {
            return Ok(());
        }
        for (pointer_null, what) in [
            (entries.is_null(), "entries"),
            (out_calls.is_null(), "out_calls"),
            (out_statuses.is_null(), "out_statuses"),
        ] {
            if pointer_null {
                return Err(Error::invalid_argument(format!("{what} is NULL")));
            }
        }
        // SAFETY: non-NULL, and `count` readable entries by the caller's contract.
        let entries = unsafe { std::slice::from_raw_parts(entries, count) };
        let conns = handles::get_each(entries.iter().map(|entry| entry.conn), |index| {
            format!("entries[{index}].conn")
        });
        let calls = entries
            .iter()
            .zip(conns)
            .enumerate()
            .map(|(index, (entry, conn))| {
                let call = conn.and_then(|conn| {
                    let timeout = try_timeout(entry.timeout_seconds).map_err(|error| {
                        Error::invalid_argument(format!("entries[{index}]: {}", error.message()))
                    })?;
                    let conn = conn.shared();
                    Ok(move || async move { conn.idle(timeout).await })
                });
                (entry.tag, call)
            })
            .collect::<Vec<_>>();
        let first_refusal = calls
            .iter()
            .find_map(|(_, call)| call.as_ref().err().cloned());
        let outcomes = start_each(&queue, WOOL_COMPLETION_KIND_IDLE, FUNCTION, calls)?;
        for (index, (call, status)) in outcomes.into_iter().enumerate() {
            // SAFETY: `index < count`, and both arrays hold `count` writable elements (the
            // caller's contract).
            unsafe {
                out_calls.add(index).write(call);
                out_statuses.add(index).write(status);
            }
        }
        if let Some(error) = first_refusal {
            super::last_error::record(FUNCTION, &error);
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::{wool_completion, wool_queue_free, wool_queue_new, wool_queue_next};
    use crate::{wool_connect, wool_free};
    use std::collections::HashMap;
    use std::time::Duration;

    /// A handle to a Unix socket path that does not exist: every poll fails at its connect,
    /// at once, as WOOL_STATUS_TRANSIENT (a real dial, no worker needed).
    fn nowhere() -> *mut wool_connection {
        let mut conn = std::ptr::null_mut();
        // SAFETY: a NUL-terminated target, no credentials, a writable out-pointer.
        let status = unsafe {
            wool_connect(
                c"unix:/nonexistent/libwool-batch-test.sock".as_ptr(),
                std::ptr::null(),
                &mut conn,
            )
        };
        assert_eq!(status, wool_status::Ok);
        conn
    }

    /// Collects `want` completions from `queue` (120 s at most: under ThreadSanitizer on a
    /// busy 2-core machine, 600 failed dials took longer than 10 s), by tag.
    fn collect(queue: *mut wool_queue, want: usize) -> HashMap<u64, wool_completion> {
        let mut by_tag = HashMap::new();
        let mut out = vec![std::mem::MaybeUninit::<wool_completion>::zeroed(); 64];
        let started = std::time::Instant::now();
        while by_tag.len() < want && started.elapsed() < Duration::from_secs(120) {
            let mut count = 0usize;
            // SAFETY: a live queue, room for 64 completions, a writable count.
            let status = unsafe {
                wool_queue_next(queue, out.as_mut_ptr().cast(), out.len(), 1.0, &mut count)
            };
            assert_eq!(status, wool_status::Ok);
            for completion in &out[..count] {
                // SAFETY: the first `count` were written.
                let completion = unsafe { completion.assume_init() };
                assert!(
                    by_tag.insert(completion.tag, completion).is_none(),
                    "tag {} completed twice",
                    completion.tag
                );
            }
        }
        by_tag
    }

    /// Given four threads each starting batches of 50 polls into one queue while this thread
    /// collects, then every poll completes exactly once under its own tag and call id; given a
    /// batch with a freed handle and a NaN timeout among good entries, then only those two are
    /// refused (their completions carry the reason); a batch one past the bound is refused
    /// whole and writes nothing.
    #[test]
    fn batches_started_from_many_threads_complete_every_entry_once() {
        let mut queue = std::ptr::null_mut();
        // SAFETY: a writable out-pointer.
        assert_eq!(unsafe { wool_queue_new(&mut queue) }, wool_status::Ok);
        let conn = nowhere();
        let (queue_value, conn_value) = (queue as usize, conn as usize);
        const THREADS: u64 = 4;
        const BATCHES: u64 = 3;
        const ENTRIES: u64 = 50;
        let starters: Vec<_> = (0..THREADS)
            .map(|thread| {
                std::thread::spawn(move || {
                    let mut started = HashMap::new();
                    for batch in 0..BATCHES {
                        let entries: Vec<wool_idle_start_entry> = (0..ENTRIES)
                            .map(|i| wool_idle_start_entry {
                                conn: conn_value as *const wool_connection,
                                timeout_seconds: 10.0,
                                tag: (thread * BATCHES + batch) * ENTRIES + i,
                            })
                            .collect();
                        let mut calls = vec![0u64; entries.len()];
                        let mut statuses = vec![wool_status::Panic; entries.len()];
                        // SAFETY: a live queue, `entries.len()` entries and room for as many
                        // calls and statuses.
                        let status = unsafe {
                            wool_idle_start_batch(
                                queue_value as *const wool_queue,
                                entries.as_ptr(),
                                entries.len(),
                                calls.as_mut_ptr(),
                                statuses.as_mut_ptr(),
                            )
                        };
                        assert_eq!(status, wool_status::Ok);
                        assert!(statuses.iter().all(|&s| s == wool_status::Ok));
                        for (entry, call) in entries.iter().zip(calls) {
                            started.insert(entry.tag, call);
                        }
                    }
                    started
                })
            })
            .collect();
        let completions = collect(queue, (THREADS * BATCHES * ENTRIES) as usize);
        let mut calls = HashMap::new();
        for starter in starters {
            calls.extend(starter.join().unwrap());
        }
        assert_eq!(completions.len(), calls.len());
        for (tag, completion) in &completions {
            assert_eq!(completion.call, calls[tag], "tag {tag}: its call id");
            assert_eq!(completion.status, wool_status::Transient, "tag {tag}");
        }

        // Refused on their own: a freed handle, a NaN timeout.
        let freed = nowhere();
        // SAFETY: a live handle, freed once.
        unsafe { wool_free(freed) };
        let mut entries: Vec<wool_idle_start_entry> = (0..5)
            .map(|i| wool_idle_start_entry {
                conn,
                timeout_seconds: 10.0,
                tag: 10_000 + i,
            })
            .collect();
        entries[1].conn = freed;
        entries[3].timeout_seconds = f64::NAN;
        let mut calls = [0u64; 5];
        let mut statuses = [wool_status::Panic; 5];
        // SAFETY: as above.
        let status = unsafe {
            wool_idle_start_batch(
                queue,
                entries.as_ptr(),
                5,
                calls.as_mut_ptr(),
                statuses.as_mut_ptr(),
            )
        };
        assert_eq!(status, wool_status::Ok);
        let refused = [1, 3];
        for (i, status) in statuses.iter().enumerate() {
            let want = if refused.contains(&i) {
                wool_status::InvalidArgument
            } else {
                wool_status::Ok
            };
            assert_eq!(*status, want, "entry {i}");
        }
        let completions = collect(queue, 5);
        let message = |tag: u64| {
            // SAFETY: NUL-terminated.
            unsafe { std::ffi::CStr::from_ptr(completions[&tag].message.as_ptr()) }
                .to_string_lossy()
                .into_owned()
        };
        assert!(message(10_001).contains("entries[1].conn: connection handle already freed"));
        assert!(
            message(10_003).contains("entries[3]: timeout"),
            "{}",
            message(10_003)
        );
        for i in 0..5 {
            assert_eq!(completions[&(10_000 + i)].call, calls[i as usize]);
            assert_eq!(completions[&(10_000 + i)].status, {
                if refused.contains(&(i as usize)) {
                    wool_status::InvalidArgument
                } else {
                    wool_status::Transient
                }
            });
        }

        // One past the bound: refused whole, nothing written, nothing started.
        let too_many = vec![entries[0]; WOOL_IDLE_START_BATCH_MAX + 1];
        let mut calls = vec![0u64; too_many.len()];
        let mut statuses = vec![wool_status::Panic; too_many.len()];
        // SAFETY: as above.
        let status = unsafe {
            wool_idle_start_batch(
                queue,
                too_many.as_ptr(),
                too_many.len(),
                calls.as_mut_ptr(),
                statuses.as_mut_ptr(),
            )
        };
        assert_eq!(status, wool_status::InvalidArgument);
        assert!(calls.iter().all(|&c| c == 0));
        assert!(statuses.iter().all(|&s| s == wool_status::Panic));
        let mut count = 1usize;
        // SAFETY: a live queue; capacity 0 needs no array.
        let status = unsafe { wool_queue_next(queue, std::ptr::null_mut(), 0, 0.2, &mut count) };
        assert_eq!((status, count), (wool_status::Ok, 0));

        // SAFETY: live handles, freed once.
        unsafe {
            wool_free(conn);
            wool_queue_free(queue);
        }
    }
}
