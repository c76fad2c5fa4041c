//! State that belongs to one process, so that a child made by `fork()` can use the library.
//!
//! A child inherits the parent's memory but not its threads: the library's runtime (whose
//! threads are gone), pooled connections (whose sockets and epoll registrations it shares with
//! the parent) and locks that a parent thread held at the moment of the fork. Touching any of
//! them in the child would corrupt the parent's connections or wait for ever. So every piece of
//! process-wide state lives in a [`PerProcess`](crate::process::PerProcess) slot, stamped with the fork generation it was
//! made in: a child counts a new generation (a `pthread_atfork` handler), and its first use of
//! a slot makes a fresh value. The parent's value is left exactly as it was and never used,
//! locked or dropped in the child (its memory is simply not reclaimed there).
//!
//! Public (hidden) for the C ABI's runtime in `libwool-capi`; not a stable API.

use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};

/// Forks seen by this process's ancestry since the library was first used: 0 in the process
/// that first used it, one more in each child forked after that.
static GENERATION: AtomicU64 = AtomicU64::new(0);
static REGISTERED: AtomicBool = AtomicBool::new(false);

extern "C" fn child_after_fork() {
    // Only an atomic store: allowed in a forked child, before anything else runs there.
    GENERATION.fetch_add(1, Ordering::Relaxed);
}

/// This process's fork generation (see `GENERATION`).
pub fn generation() -> u64 {
    if !REGISTERED.load(Ordering::Relaxed) && !REGISTERED.swap(true, Ordering::AcqRel) {
        // SAFETY: registers a handler that only changes an atomic.
        unsafe { libc::pthread_atfork(None, None, Some(child_after_fork)) };
    }
    GENERATION.load(Ordering::Relaxed)
}

/// A value made at most once per process (see the module docs). Lock-free, so a child never
/// waits on a lock a vanished thread of its parent held.
pub struct PerProcess<T> {
    slot: AtomicPtr<Stamped<T>>,
}

struct Stamped<T> {
    generation: u64,
    value: T,
}

impl<T> Default for PerProcess<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> PerProcess<T> {
    /// An empty slot.
    pub const fn new() -> Self {
        Self {
            slot: AtomicPtr::new(std::ptr::null_mut()),
        }
    }

    /// This process's value, if it has made one.
    pub fn get(&'static self) -> Option<&'static T> {
        let generation = generation();
        // SAFETY: a non-null pointer in the slot came from `Box::into_raw` below and is never
        // freed (values are 'static; a replaced one is leaked on purpose).
        unsafe { self.slot.load(Ordering::Acquire).as_ref() }
            .filter(|stamped| stamped.generation == generation)
            .map(|stamped| &stamped.value)
    }

    /// This process's value, made by `init` on first use in this process. If two threads race
    /// to make it, one value wins and the other is dropped; `installed` runs once, for the
    /// winner.
    pub fn get_or_try_init<E>(
        &'static self,
        init: impl FnOnce() -> Result<T, E>,
        installed: impl FnOnce(&'static T),
    ) -> Result<&'static T, E> {
        let generation = generation();
        let current = self.slot.load(Ordering::Acquire);
        // SAFETY: as in `get`.
        if let Some(stamped) = unsafe { current.as_ref() } {
            if stamped.generation == generation {
                return Ok(&stamped.value);
            }
        }
        let made = Box::into_raw(Box::new(Stamped {
            generation,
            value: init()?,
        }));
        match self
            .slot
            .compare_exchange(current, made, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => {
                // SAFETY: just installed; never freed. The value it replaced (the parent's)
                // stays untouched.
                let value = unsafe { &(*made).value };
                installed(value);
                Ok(value)
            }
            Err(winner) => {
                // SAFETY: `made` was never shared; `winner` is as in `get`, made in this
                // generation by the thread that won.
                unsafe {
                    drop(Box::from_raw(made));
                    Ok(&(*winner).value)
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_is_made_once_per_process() {
        static SLOT: PerProcess<u32> = PerProcess::new();
        assert!(SLOT.get().is_none());
        let mut installs = 0;
        let first = SLOT
            .get_or_try_init(|| Ok::<_, ()>(7), |_| installs += 1)
            .unwrap();
        let again = SLOT
            .get_or_try_init(|| Ok::<_, ()>(8), |_| installs += 1)
            .unwrap();
        assert_eq!((*first, *again, installs), (7, 7, 1));
        assert_eq!(SLOT.get(), Some(&7));
        // A forked child's fresh value is tested for real, in forked processes: the C harness
        // (`fork_child_polls`) and the Python binding's multiprocessing test.
    }
}
