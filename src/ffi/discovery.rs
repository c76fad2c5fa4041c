//! Discovery in the C ABI: `wool_discover` (a listing), `wool_watch_*` (joins and leaves),
//! `wool_connect_worker` (a handle to a discovered worker, TLS as it advertises).

use std::ffi::{c_char, c_int, CString};
use std::sync::Mutex;
use std::time::Duration;

use super::connection::wool_connection;
use super::credentials::wool_credentials;
use super::options::wool_channel_options;
use super::{ffi_panic_boundary, free_boxed, set_boxed, try_mut, try_ref, try_str, wool_status};
use crate::connection::{Error, WorkerConnection};
use crate::fleet::discovery::{
    DiscoveredWorker, Discovery, DiscoveryEvent, LanDiscovery, LocalDiscovery, Watch,
};

/// wool_discover / wool_watch_new backend: the shared-memory registry on this host (Wool's
/// LocalDiscovery).
pub const WOOL_DISCOVERY_LOCAL: c_int = 0;
/// wool_discover / wool_watch_new backend: DNS-SD over multicast DNS (Wool's LanDiscovery).
pub const WOOL_DISCOVERY_LAN: c_int = 1;

/// wool_watch_next: nothing happened within the timeout.
pub const WOOL_DISCOVERY_EVENT_NONE: c_int = 0;
/// wool_watch_next: a worker joined (also reported for each worker present at the start).
pub const WOOL_DISCOVERY_EVENT_ADDED: c_int = 1;
/// wool_watch_next: a worker's published metadata changed.
pub const WOOL_DISCOVERY_EVENT_UPDATED: c_int = 2;
/// wool_watch_next: a worker left (the worker given is its last known metadata).
pub const WOOL_DISCOVERY_EVENT_DROPPED: c_int = 3;

/// One discovered worker (Wool's WorkerMetadata). Every string is NUL-terminated UTF-8, never
/// NULL, and lives as long as the list or watch event it came from. Pass it to
/// wool_connect_worker to reach the worker. A host may also fill one itself for
/// wool_connect_worker (only `address`, `secure` and `identity` are read).
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Clone, Copy)]
pub struct wool_worker_info {
    /// The worker's UUID, hyphenated.
    pub uid: *const c_char,
    /// Where it listens, `host:port`: a target for wool_connect.
    pub address: *const c_char,
    /// Its process id on its host.
    pub pid: i32,
    /// The Wool version it runs.
    pub version: *const c_char,
    /// Its tags as a JSON list of strings, sorted (`[]` when none).
    pub tags_json: *const c_char,
    /// Its extra metadata as a JSON object of strings (`{}` when none).
    pub extra_json: *const c_char,
    /// Whether it serves TLS (wool_connect_worker then needs credentials).
    pub secure: bool,
    /// The name its certificate is issued for; "" when it advertises none.
    pub identity: *const c_char,
}

/// A worker's C view with the strings it points into.
struct OwnedWorker {
    info: wool_worker_info,
    _strings: [CString; 6],
}

// SAFETY: the raw pointers point into `_strings`, owned by the same value and never shared
// mutably; moving the value does not move the strings' heap buffers.
unsafe impl Send for OwnedWorker {}

impl OwnedWorker {
    fn new(worker: &DiscoveredWorker) -> Self {
        // Text from the network may hold NUL bytes, which C strings cannot: drop them.
        let text = |s: &str| CString::new(s.replace('\0', "")).expect("NULs removed");
        let strings = [
            text(&worker.uid.to_string()),
            text(&worker.address),
            text(&worker.version),
            text(&serde_json::to_string(&worker.tags).expect("strings serialize")),
            text(&serde_json::to_string(&worker.extra).expect("strings serialize")),
            text(worker.identity.as_deref().unwrap_or("")),
        ];
        let info = wool_worker_info {
            uid: strings[0].as_ptr(),
            address: strings[1].as_ptr(),
            pid: worker.pid,
            version: strings[2].as_ptr(),
            tags_json: strings[3].as_ptr(),
            extra_json: strings[4].as_ptr(),
            secure: worker.secure,
            identity: strings[5].as_ptr(),
        };
        Self {
            info,
            _strings: strings,
        }
    }
}

/// A listing from wool_discover. Opaque; read with wool_worker_list_count and
/// wool_worker_list_get, release with wool_worker_list_free.
#[allow(non_camel_case_types)]
pub struct wool_worker_list {
    workers: Vec<OwnedWorker>,
}

/// A running watch over a pool, from wool_watch_new. Opaque; release with wool_watch_free.
#[allow(non_camel_case_types)]
pub struct wool_watch {
    watch: Watch,
    /// The worker of the last event handed out, kept alive until the next call.
    last: Mutex<Option<OwnedWorker>>,
}

/// The backend `backend` names for `namespace`; `listen` is the LAN listing window.
fn discovery(
    namespace: &str,
    backend: c_int,
    listen: Option<Duration>,
) -> Result<Discovery, Error> {
    match backend {
        WOOL_DISCOVERY_LOCAL => Ok(Discovery::Local(LocalDiscovery::new(namespace)?)),
        WOOL_DISCOVERY_LAN => {
            let lan = LanDiscovery::new(namespace)?;
            Ok(Discovery::Lan(match listen {
                Some(listen) => lan.listen_for(listen),
                None => lan,
            }))
        }
        other => Err(Error::invalid_argument(format!(
            "backend must be WOOL_DISCOVERY_LOCAL (0) or WOOL_DISCOVERY_LAN (1), got {other}"
        ))),
    }
}

/// Lists the workers of the pool published under `namespace` and writes the list to `*out`:
/// the shared-memory registry on this host (WOOL_DISCOVERY_LOCAL; a namespace with no
/// registry lists as empty), or DNS-SD over multicast DNS (WOOL_DISCOVERY_LAN), listening
/// `listen_seconds` for answers (0 = the default, 1.5 s; ignored for LOCAL). Sorted by address.
/// Records that cannot be read (half-written, foreign) are skipped. Blocks the calling thread.
///
/// Returns WOOL_STATUS_INVALID_ARGUMENT (NULL or non-UTF-8 `namespace_`, an empty namespace,
/// an unknown backend, a negative, NaN or infinite `listen_seconds`, NULL `out`) or
/// WOOL_STATUS_TRANSIENT (the registry cannot be read; multicast DNS cannot start).
///
/// # Safety
/// `namespace_` must be NULL or NUL-terminated; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn wool_discover(
    namespace_: *const c_char,
    backend: c_int,
    listen_seconds: f64,
    out: *mut *mut wool_worker_list,
) -> wool_status {
    ffi_panic_boundary!("wool_discover", {
        // SAFETY: the caller's contract above.
        let namespace = unsafe { try_str(namespace_, "namespace") }?;
        // SAFETY: the caller's contract above.
        let out = unsafe { try_mut(out, "out") }?;
        // `try_from_secs_f64` refuses NaN, negative values and ones too large for a Duration.
        let listen = Duration::try_from_secs_f64(listen_seconds)
            .ok()
            .filter(|_| listen_seconds.is_finite())
            .ok_or_else(|| {
                Error::invalid_argument(format!(
                    "listen_seconds must be 0 (the default) or positive finite seconds, got \
                     {listen_seconds}"
                ))
            })?;
        let listen = Some(listen).filter(|l| !l.is_zero());
        let workers = discovery(namespace, backend, listen)?.list()?;
        set_boxed(
            out,
            wool_worker_list {
                workers: workers.iter().map(OwnedWorker::new).collect(),
            },
        );
        Ok(())
    })
}

/// The number of workers in `list` (0 for NULL).
///
/// # Safety
/// `list` must be NULL or a live list from wool_discover.
#[no_mangle]
pub unsafe extern "C" fn wool_worker_list_count(list: *const wool_worker_list) -> usize {
    ffi_panic_boundary!("wool_worker_list_count", {
        // SAFETY: the caller's contract above.
        unsafe { list.as_ref() }.map_or(0, |list| list.workers.len())
    })
}

/// The worker at `index` in `list`, valid until the list is freed; NULL when `list` is NULL or
/// `index` is out of range.
///
/// # Safety
/// `list` must be NULL or a live list from wool_discover.
#[no_mangle]
pub unsafe extern "C" fn wool_worker_list_get(
    list: *const wool_worker_list,
    index: usize,
) -> *const wool_worker_info {
    ffi_panic_boundary!("wool_worker_list_get", {
        // SAFETY: the caller's contract above.
        unsafe { list.as_ref() }
            .and_then(|list| list.workers.get(index))
            .map_or(std::ptr::null(), |worker| &worker.info as *const _)
    })
}

/// Releases a list and every worker in it; NULL is a no-op.
///
/// # Safety
/// `list` must be NULL or a list from wool_discover not yet freed; nothing may use it or its
/// workers afterwards.
#[no_mangle]
pub unsafe extern "C" fn wool_worker_list_free(list: *mut wool_worker_list) {
    ffi_panic_boundary!("wool_worker_list_free", {
        // SAFETY: the caller's contract above.
        unsafe { free_boxed(list) }
    })
}

/// Makes a handle to a discovered worker and writes it to `*out`, as Wool's pool reaches a
/// discovered worker: over TLS with `credentials` when `worker->secure` (verified against
/// `worker->identity` when it is not "", else the credentials' identity or the address),
/// plaintext otherwise (`credentials` then unused). `options` NULL = Wool's defaults. No I/O.
///
/// Returns WOOL_STATUS_INVALID_ARGUMENT when `worker` or `out` is NULL, its address is NULL,
/// not UTF-8 or not a target, its identity is not a DNS name or IP address, or it is secure and
/// `credentials` is NULL.
///
/// # Safety
/// `worker` must be NULL or point to a wool_worker_info whose `address` and `identity` are NULL
/// or NUL-terminated; `credentials` NULL or live; `options` NULL or live; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn wool_connect_worker(
    worker: *const wool_worker_info,
    credentials: *const wool_credentials,
    options: *const wool_channel_options,
    out: *mut *mut wool_connection,
) -> wool_status {
    ffi_panic_boundary!("wool_connect_worker", {
        // SAFETY (all): the caller's contract above.
        let worker = unsafe { try_ref(worker, "worker") }?;
        let address = unsafe { try_str(worker.address, "worker->address") }?;
        let identity = unsafe { super::try_optional_str(worker.identity, "worker->identity") }?;
        let credentials = unsafe { credentials.as_ref() }.map(|c| &c.inner);
        let options = unsafe { options.as_ref() }.map(|o| o.inner.clone());
        let out = unsafe { try_mut(out, "out") }?;
        let discovered = DiscoveredWorker {
            address: address.to_owned(),
            secure: worker.secure,
            identity: identity.filter(|i| !i.is_empty()).map(str::to_owned),
            ..placeholder()
        };
        let connection: WorkerConnection =
            discovered.connect(credentials, options.unwrap_or_default())?;
        set_boxed(out, wool_connection::new(connection));
        Ok(())
    })
}

/// A worker with only what wool_connect_worker reads still to fill in.
fn placeholder() -> DiscoveredWorker {
    DiscoveredWorker {
        uid: uuid::Uuid::nil(),
        address: String::new(),
        pid: 0,
        version: String::new(),
        tags: Default::default(),
        extra: Default::default(),
        secure: false,
        identity: None,
        options: None,
    }
}

/// Starts watching the pool published under `namespace` (backends as wool_discover) and writes
/// the watch to `*out`. The watch runs on a library thread; collect its events with
/// wool_watch_next. It first reports every worker present, then each join, change and leave.
///
/// Returns WOOL_STATUS_INVALID_ARGUMENT (as wool_discover) or WOOL_STATUS_TRANSIENT (the watch
/// cannot start).
///
/// # Safety
/// `namespace_` must be NULL or NUL-terminated; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn wool_watch_new(
    namespace_: *const c_char,
    backend: c_int,
    out: *mut *mut wool_watch,
) -> wool_status {
    ffi_panic_boundary!("wool_watch_new", {
        // SAFETY: the caller's contract above.
        let namespace = unsafe { try_str(namespace_, "namespace") }?;
        // SAFETY: the caller's contract above.
        let out = unsafe { try_mut(out, "out") }?;
        let watch = discovery(namespace, backend, None)?.watch()?;
        set_boxed(
            out,
            wool_watch {
                watch,
                last: Mutex::new(None),
            },
        );
        Ok(())
    })
}

/// Waits up to `timeout_seconds` (0 = do not wait, INFINITY = as long as it takes) for the
/// watch's next event and writes its kind to `*out_kind` (WOOL_DISCOVERY_EVENT_*) and its
/// worker to `*out_worker`, valid until the next wool_watch_next on this watch or
/// wool_watch_free. When nothing happened in time: WOOL_DISCOVERY_EVENT_NONE and NULL.
///
/// Returns WOOL_STATUS_INVALID_ARGUMENT for a NULL argument or a negative or NaN timeout, or
/// WOOL_STATUS_TRANSIENT once the watch has ended (its backend stopped, e.g. the multicast DNS
/// responder failed; every event before that was handed out): free it and start another.
///
/// # Safety
/// `watch` must be NULL or a live watch; `out_kind` and `out_worker` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn wool_watch_next(
    watch: *const wool_watch,
    timeout_seconds: f64,
    out_kind: *mut c_int,
    out_worker: *mut *const wool_worker_info,
) -> wool_status {
    ffi_panic_boundary!("wool_watch_next", {
        // SAFETY (all): the caller's contract above.
        let watch = unsafe { try_ref(watch, "watch") }?;
        let out_kind = unsafe { try_mut(out_kind, "out_kind") }?;
        let out_worker = unsafe { try_mut(out_worker, "out_worker") }?;
        if timeout_seconds.is_nan() || timeout_seconds < 0.0 {
            return Err(Error::invalid_argument(format!(
                "timeout_seconds must be 0, positive or INFINITY, got {timeout_seconds}"
            )));
        }
        let timeout = Duration::try_from_secs_f64(timeout_seconds).ok();
        let event = watch.watch.next_timeout(timeout)?;
        let mut last = watch.last.lock().unwrap_or_else(|e| e.into_inner());
        let (kind, worker) = match event {
            None => (WOOL_DISCOVERY_EVENT_NONE, None),
            Some(DiscoveryEvent::Added(w)) => (WOOL_DISCOVERY_EVENT_ADDED, Some(w)),
            Some(DiscoveryEvent::Updated(w)) => (WOOL_DISCOVERY_EVENT_UPDATED, Some(w)),
            Some(DiscoveryEvent::Dropped(w)) => (WOOL_DISCOVERY_EVENT_DROPPED, Some(w)),
        };
        *last = worker.as_ref().map(OwnedWorker::new);
        *out_kind = kind;
        *out_worker = last
            .as_ref()
            .map_or(std::ptr::null(), |w| &w.info as *const _);
        Ok(())
    })
}

/// Stops a watch and releases it; NULL is a no-op.
///
/// # Safety
/// `watch` must be NULL or a watch from wool_watch_new not yet freed, with no wool_watch_next
/// running on it; nothing may use it or its events' workers afterwards.
#[no_mangle]
pub unsafe extern "C" fn wool_watch_free(watch: *mut wool_watch) {
    ffi_panic_boundary!("wool_watch_free", {
        // SAFETY: the caller's contract above.
        unsafe { free_boxed(watch) }
    })
}
