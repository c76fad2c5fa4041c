//! The handle table: what the opaque pointers of `wool.h` really are.
//!
//! Every handle the library hands out (`wool_connection`, `wool_queue`, `wool_credentials`,
//! `wool_channel_options`, `wool_worker_list`, `wool_watch`) is an opaque value that encodes a
//! slot of one process-wide table and that slot's generation, never an address:
//!
//! ```text
//!   bit 63      bits 59..62   bits 27..58    bits 3..26   bits 0..2
//!   1           0             generation     slot         0
//! ```
//!
//! (bit 63 set: no user-space address looks like it; the low bits zero: it still looks aligned
//! to a host that checks.) A slot holds the object as an [`Arc`] with its type's name. A call
//! looks its handle up under the table's read lock and leaves with a clone of the `Arc`, so
//! the object lives while the call runs; a free removes it from its slot under the write lock
//! and bumps the slot's generation, so the freed value never matches again, and the object
//! goes away when the last call still running on it drops its `Arc`. Hence:
//! - a freed handle, or a handle of another type, is refused as an invalid argument without
//!   touching memory the host may have reused;
//! - a second free does nothing but set the thread's last error;
//! - a free while other threads are in calls on the handle lets those calls finish; calls that
//!   wait on the freed object ([`Handle::freed`]: the queue's and the watch's waits) end at once.
//!
//! What it cannot catch: a value the host made up that equals a live handle, a pointer into a
//! handle's data (`wool_worker_info`, which is no handle), more than [`MAX_SLOTS`] live handles
//! at once (refused at creation), and a stale handle whose slot was freed exactly 2^32 times
//! since (the generation wraps).
//!
//! Fork: the table's write lock is held across `fork()` (a `pthread_atfork` handler), so a
//! child's copy of the table is never caught halfway through a change; a child sees every
//! handle its parent had, each behaving as docs/C-API.md says of inherited handles.

use std::any::Any;
use std::cell::RefCell;
use std::sync::{Arc, Once, PoisonError, RwLock, RwLockWriteGuard};

use libwool::connection::{Error, ErrorKind};

/// Live handles at most: the slot field is 24 bits.
pub(crate) const MAX_SLOTS: usize = 1 << SLOT_BITS;

const SLOT_SHIFT: u32 = 3;
const SLOT_BITS: u32 = 24;
const GENERATION_SHIFT: u32 = SLOT_SHIFT + SLOT_BITS;
const MARK: u64 = 1 << 63;
/// Every bit a handle may have set: the mark, the generation and the slot.
const USED_BITS: u64 = MARK | (u32::MAX as u64) << GENERATION_SHIFT | SLOT_MASK << SLOT_SHIFT;
const SLOT_MASK: u64 = (1 << SLOT_BITS) - 1;

// Handles are 64-bit values carried in pointers.
const _: () = assert!(usize::BITS == 64, "libwool's handles need 64-bit pointers");

/// A type the host holds through a handle.
pub(crate) trait Handle: Any + Send + Sync {
    /// The type's name in messages ("connection", "queue", …).
    const NAME: &'static str;

    /// Runs once, when the host frees the handle, while calls on other threads may still hold
    /// the object: ends their waits (a freed queue's or watch's wait returns at once, as a
    /// timeout would). The object itself goes away after the last of them.
    fn freed(&self) {}
}

/// A live handle's object and what it is.
struct Entry {
    object: Arc<dyn Any + Send + Sync>,
    name: &'static str,
    /// [`Handle::freed`] of the object's type.
    freed: fn(&(dyn Any + Send + Sync)),
}

struct Slot {
    generation: u32,
    entry: Option<Entry>,
}

struct Table {
    slots: Vec<Slot>,
    /// Slots with no entry, reused last freed first.
    vacant: Vec<u32>,
}

static TABLE: RwLock<Table> = RwLock::new(Table {
    slots: Vec::new(),
    vacant: Vec::new(),
});

thread_local! {
    /// The write lock the forking thread holds from the `prepare` handler to the parent's or
    /// child's handler.
    static FORK_GUARD: RefCell<Option<RwLockWriteGuard<'static, Table>>> =
        const { RefCell::new(None) };
}

extern "C" fn before_fork() {
    let guard = TABLE.write().unwrap_or_else(PoisonError::into_inner);
    let _ = FORK_GUARD.try_with(|held| *held.borrow_mut() = Some(guard));
}

extern "C" fn after_fork() {
    // In the parent and in the child alike: the thread that forked unlocks.
    let _ = FORK_GUARD.try_with(|held| held.borrow_mut().take());
}

fn register_fork_handlers() {
    static REGISTERED: Once = Once::new();
    REGISTERED.call_once(|| {
        // SAFETY: handlers that only take and release the table's lock; registered once.
        unsafe { libc::pthread_atfork(Some(before_fork), Some(after_fork), Some(after_fork)) };
    });
}

/// A slot and generation from a handle's value, `None` when the value is no handle's shape.
fn decode(value: usize) -> Option<(usize, u32)> {
    let value = value as u64;
    if value & MARK == 0 || value & !USED_BITS != 0 {
        return None;
    }
    let slot = ((value >> SLOT_SHIFT) & SLOT_MASK) as usize;
    let generation = (value >> GENERATION_SHIFT) as u32;
    Some((slot, generation))
}

fn encode(slot: usize, generation: u32) -> usize {
    (MARK | (generation as u64) << GENERATION_SHIFT | (slot as u64) << SLOT_SHIFT) as usize
}

/// Puts `object` in the table and returns its handle.
///
/// Errors: [`ErrorKind::Transient`] (RESOURCE_EXHAUSTED) when [`MAX_SLOTS`] handles are live.
pub(crate) fn insert<T: Handle>(object: T) -> Result<*mut T, Error> {
    register_fork_handlers();
    let entry = Entry {
        object: Arc::new(object),
        name: T::NAME,
        freed: freed_of::<T>,
    };
    let mut table = TABLE.write().unwrap_or_else(PoisonError::into_inner);
    let slot = match table.vacant.pop() {
        Some(slot) => slot as usize,
        None if table.slots.len() < MAX_SLOTS => {
            table.slots.push(Slot {
                generation: 0,
                entry: None,
            });
            table.slots.len() - 1
        }
        None => {
            return Err(Error::new(
                ErrorKind::Transient,
                Some(tonic::Code::ResourceExhausted),
                format!("too many live handles (at most {MAX_SLOTS}): free some first"),
            ))
        }
    };
    let place = &mut table.slots[slot];
    place.entry = Some(entry);
    Ok(encode(slot, place.generation) as *mut T)
}

/// Writes a new handle to `object` to `*out`.
///
/// Errors: as [`insert`].
pub(crate) fn set_handle<T: Handle>(out: &mut *mut T, object: T) -> Result<(), Error> {
    *out = insert(object)?;
    Ok(())
}

fn freed_of<T: Handle>(object: &(dyn Any + Send + Sync)) {
    if let Some(object) = object.downcast_ref::<T>() {
        object.freed();
    }
}

/// The object behind `handle`, held for as long as the caller keeps the `Arc`; `what` names the
/// parameter in errors.
///
/// Errors: [`ErrorKind::InvalidArgument`] for NULL, a value that is no handle, a freed handle
/// ("conn: connection handle already freed") or one of another type ("conn is a queue handle,
/// not a connection handle").
pub(crate) fn get<T: Handle>(handle: *const T, what: &str) -> Result<Arc<T>, Error> {
    let table = TABLE.read().unwrap_or_else(PoisonError::into_inner);
    look_up(&table, handle, || what.to_string())
}

/// The objects behind `handles`, each looked up as [`get`] does but all under one read lock of
/// the table (a batch of starts takes it once, not once a start); `what(index)` names the
/// handle at `index` in its error.
///
/// Errors: each element as [`get`]'s, on its own.
pub(crate) fn get_each<T: Handle>(
    handles: impl IntoIterator<Item = *const T>,
    what: impl Fn(usize) -> String,
) -> Vec<Result<Arc<T>, Error>> {
    let table = TABLE.read().unwrap_or_else(PoisonError::into_inner);
    handles
        .into_iter()
        .enumerate()
        .map(|(index, handle)| look_up(&table, handle, || what(index)))
        .collect()
}

/// The object behind `handle` in `table` (locked by the caller); `what` names it in errors.
fn look_up<T: Handle>(
    table: &Table,
    handle: *const T,
    what: impl Fn() -> String,
) -> Result<Arc<T>, Error> {
    if handle.is_null() {
        return Err(Error::invalid_argument(format!("{} is NULL", what())));
    }
    let (slot, generation) = decode(handle as usize).ok_or_else(|| not_a_handle::<T>(&what()))?;
    let object = match table.slots.get(slot).map(|place| (place, &place.entry)) {
        Some((place, Some(entry))) if place.generation == generation => {
            if entry.name != T::NAME {
                return Err(wrong_type::<T>(&what(), entry.name));
            }
            Arc::clone(&entry.object)
        }
        Some(_) => return Err(already_freed::<T>(&what())),
        None => return Err(not_a_handle::<T>(&what())),
    };
    // The name matched, so the type does: a name belongs to one type.
    object
        .downcast::<T>()
        .map_err(|_| not_a_handle::<T>(&what()))
}

/// As [`get`], with NULL allowed (`None`): the optional handles (credentials, options).
///
/// Errors: as [`get`], but for NULL.
pub(crate) fn get_optional<T: Handle>(
    handle: *const T,
    what: &str,
) -> Result<Option<Arc<T>>, Error> {
    if handle.is_null() {
        return Ok(None);
    }
    get(handle, what).map(Some)
}

/// Frees `handle` (NULL: nothing to do). Calls still running on it keep the object until they
/// return; [`Handle::freed`] ends their waits. A handle already freed, or of another type, is
/// left alone: that is the error.
///
/// Errors: [`ErrorKind::InvalidArgument`] as [`get`].
pub(crate) fn free<T: Handle>(handle: *mut T, what: &str) -> Result<(), Error> {
    if handle.is_null() {
        return Ok(());
    }
    let (slot, generation) = decode(handle as usize).ok_or_else(|| not_a_handle::<T>(what))?;
    let entry = {
        let mut table = TABLE.write().unwrap_or_else(PoisonError::into_inner);
        let Some(place) = table.slots.get_mut(slot) else {
            return Err(not_a_handle::<T>(what));
        };
        match &place.entry {
            Some(entry) if place.generation == generation => {
                if entry.name != T::NAME {
                    return Err(wrong_type::<T>(what, entry.name));
                }
            }
            _ => return Err(already_freed::<T>(what)),
        }
        let entry = place.entry.take();
        place.generation = place.generation.wrapping_add(1);
        table.vacant.push(slot as u32);
        entry
    };
    // Outside the lock: waking waiters and dropping the object (maybe the last reference to a
    // connection, a watch's thread) must not hold up other threads' lookups.
    if let Some(entry) = entry {
        (entry.freed)(&*entry.object);
    }
    Ok(())
}

fn not_a_handle<T: Handle>(what: &str) -> Error {
    Error::invalid_argument(format!(
        "{what} is not a {} handle made by libwool",
        T::NAME
    ))
}

fn already_freed<T: Handle>(what: &str) -> Error {
    Error::invalid_argument(format!("{what}: {} handle already freed", T::NAME))
}

fn wrong_type<T: Handle>(what: &str, actual: &str) -> Error {
    Error::invalid_argument(format!(
        "{what} is a {actual} handle, not a {} handle",
        T::NAME
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[derive(Debug)]
    struct Plum(u32);
    impl Handle for Plum {
        const NAME: &'static str = "plum";
    }

    #[derive(Debug)]
    struct Pear {
        freed: AtomicUsize,
    }
    impl Handle for Pear {
        const NAME: &'static str = "pear";
        fn freed(&self) {
            self.freed.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn message(error: Error) -> String {
        assert_eq!(error.kind(), ErrorKind::InvalidArgument);
        error.message().to_string()
    }

    #[test]
    fn values_carry_the_mark_the_slot_and_the_generation() {
        for (slot, generation) in [(0, 0), (1, 7), (MAX_SLOTS - 1, u32::MAX)] {
            let value = encode(slot, generation);
            assert_eq!(value & 0b111, 0, "aligned");
            assert_ne!(value as u64 & MARK, 0);
            assert_eq!(decode(value), Some((slot, generation)));
        }
        assert_eq!(decode(0x7fff_0000_1000), None, "an address");
        assert_eq!(decode(encode(3, 1) | 0b100), None, "low bits");
        assert_eq!(decode(encode(3, 1) | 1 << 60), None, "unused high bits");
    }

    #[test]
    fn a_handle_finds_its_object_until_freed_then_never_again() {
        let handle = insert(Plum(5)).unwrap();
        assert_eq!(get(handle, "a").unwrap().0, 5);
        let held = get(handle, "a").unwrap();
        free(handle, "a").unwrap();
        assert_eq!(held.0, 5, "a running call keeps the object");
        assert_eq!(
            message(get(handle, "a").unwrap_err()),
            "a: plum handle already freed"
        );
        assert_eq!(
            message(free(handle, "a").unwrap_err()),
            "a: plum handle already freed"
        );
        // The slot is reused with a new generation: the old value still does not match.
        let again = insert(Plum(6)).unwrap();
        assert_ne!(again, handle);
        assert!(get(handle, "a").is_err());
        assert_eq!(get(again, "a").unwrap().0, 6);
        free(again, "a").unwrap();
    }

    #[test]
    fn a_handle_of_another_type_is_refused_and_left_alive() {
        let pear = insert(Pear {
            freed: AtomicUsize::new(0),
        })
        .unwrap();
        let as_apple = pear.cast::<Plum>();
        assert_eq!(
            message(get(as_apple, "conn").unwrap_err()),
            "conn is a pear handle, not a plum handle"
        );
        assert!(free(as_apple, "conn").is_err());
        let held = get(pear, "p").unwrap();
        assert_eq!(held.freed.load(Ordering::SeqCst), 0);
        free(pear, "p").unwrap();
        assert_eq!(held.freed.load(Ordering::SeqCst), 1, "freed runs once");
        assert!(free(pear, "p").is_err());
        assert_eq!(held.freed.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn null_and_made_up_values_are_refused() {
        assert_eq!(
            message(get(std::ptr::null::<Plum>(), "x").unwrap_err()),
            "x is NULL"
        );
        assert!(free(std::ptr::null_mut::<Plum>(), "x").is_ok());
        assert_eq!(
            get_optional(std::ptr::null::<Plum>(), "x")
                .unwrap()
                .map(|a| a.0),
            None
        );
        let address = Box::into_raw(Box::new(Plum(1)));
        assert_eq!(
            message(get(address, "x").unwrap_err()),
            "x is not a plum handle made by libwool"
        );
        // SAFETY: from Box::into_raw just above.
        drop(unsafe { Box::from_raw(address) });
        let far = encode(MAX_SLOTS - 1, 0) as *const Plum;
        assert!(get(far, "x").is_err(), "a slot never made");
    }
}
