//! Discovery in the C ABI: `wool_discover` / `wool_discover_admitted` (a listing, each worker
//! with the admission gate's verdict), `wool_watch_*` (joins and leaves), `wool_connect_worker`
//! and `wool_worker_list_connect` (a handle to a worker the gate admits); `wool_discover_dns`
//! (a listing by DNS name).

use std::ffi::{c_char, c_int, CString};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use super::connection::wool_connection;
use super::credentials::wool_credentials;
use super::handles::{self, Handle};
use super::options::wool_channel_options;
use super::{ffi_panic_boundary, free_handle, runtime, try_mut, try_ref, try_str, wool_status};
use libwool::connection::WorkerCredentials;
use libwool::connection::{Error, WorkerConnection};
use libwool::fleet::discovery::{
    DiscoveredWorker, Discovery, DiscoveryEvent, DnsDiscovery, LanDiscovery, LocalDiscovery,
    Refusal, Watch,
};

/// wool_discover / wool_watch_new backend: the shared-memory registry on this host (Wool's
/// LocalDiscovery).
pub const WOOL_DISCOVERY_LOCAL: c_int = 0;
/// wool_discover / wool_watch_new backend: DNS-SD over multicast DNS (Wool's LanDiscovery).
pub const WOOL_DISCOVERY_LAN: c_int = 1;
/// The DNS backend (every address a DNS name resolves to, at a port): listed with
/// wool_discover_dns only, since it needs a port; wool_discover, wool_discover_admitted and
/// wool_watch_new refuse it (WOOL_STATUS_INVALID_ARGUMENT).
pub const WOOL_DISCOVERY_DNS: c_int = 2;

/// wool_worker_info.refusal: the admission gate admits the worker.
pub const WOOL_DISCOVERY_REFUSAL_NONE: c_int = 0;
/// wool_worker_info.refusal: refused on security (it serves TLS and the listing had no
/// credentials, or it advertises plaintext and the listing had credentials).
pub const WOOL_DISCOVERY_REFUSAL_SECURITY: c_int = 1;
/// wool_worker_info.refusal: refused on version (not PEP 440, or incompatible with this
/// library's protocol version).
pub const WOOL_DISCOVERY_REFUSAL_VERSION: c_int = 2;
/// wool_worker_info.refusal: refused on identity (the credentials' peers policy does not
/// accept the name it advertises, or it advertises none).
pub const WOOL_DISCOVERY_REFUSAL_IDENTITY: c_int = 3;

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
/// wool_connect_worker (only `address`, `version`, `secure` and `identity` are read; the
/// fields after `identity` never are).
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
    /// The admission gate's verdict for the credentials the listing or watch was made with
    /// (none for wool_discover and wool_watch_new): WOOL_DISCOVERY_REFUSAL_NONE when admitted, else
    /// WOOL_DISCOVERY_REFUSAL_SECURITY, _VERSION or _IDENTITY. A refused worker is never connected.
    pub refusal: c_int,
    /// Why it was refused, e.g. `identity "w2" (accepted peers: w1)`; "" when admitted.
    pub refusal_reason: *const c_char,
}

/// A worker's C view with the strings it points into, and the record it came from.
struct OwnedWorker {
    info: wool_worker_info,
    _strings: [CString; 7],
    worker: DiscoveredWorker,
}

// SAFETY: the raw pointers point into `_strings`, owned by the same value and never shared
// mutably; moving the value does not move the strings' heap buffers.
unsafe impl Send for OwnedWorker {}
// SAFETY: nothing changes an `OwnedWorker` after it is made; threads sharing one only read it.
unsafe impl Sync for OwnedWorker {}

impl OwnedWorker {
    /// The C view of `worker` with the gate's verdict for `credentials`.
    fn new(worker: &DiscoveredWorker, credentials: Option<&WorkerCredentials>) -> Self {
        let refusal = worker.refusal(credentials);
        // Text from the network may hold NUL bytes, which C strings cannot: drop them.
        let text = |s: &str| CString::new(s.replace('\0', "")).expect("NULs removed");
        let strings = [
            text(&worker.uid.to_string()),
            text(&worker.address),
            text(&worker.version),
            text(&serde_json::to_string(&worker.tags).expect("strings serialize")),
            text(&serde_json::to_string(&worker.extra).expect("strings serialize")),
            text(worker.identity.as_deref().unwrap_or("")),
            text(
                &refusal
                    .as_ref()
                    .map(ToString::to_string)
                    .unwrap_or_default(),
            ),
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
            refusal: match refusal {
                None => WOOL_DISCOVERY_REFUSAL_NONE,
                Some(Refusal::Security { .. }) => WOOL_DISCOVERY_REFUSAL_SECURITY,
                Some(Refusal::Version { .. }) => WOOL_DISCOVERY_REFUSAL_VERSION,
                Some(Refusal::Identity { .. }) => WOOL_DISCOVERY_REFUSAL_IDENTITY,
                // `Refusal` is non-exhaustive: an arm this ABI does not name yet is still a
                // refusal (never NONE); `refusal_reason` says which.
                Some(_) => WOOL_DISCOVERY_REFUSAL_SECURITY,
            },
            refusal_reason: strings[6].as_ptr(),
        };
        Self {
            info,
            _strings: strings,
            worker: worker.clone(),
        }
    }
}

/// A listing from wool_discover. Opaque; read with wool_worker_list_count and
/// wool_worker_list_get, release with wool_worker_list_free.
#[allow(non_camel_case_types)]
pub struct wool_worker_list {
    workers: Vec<OwnedWorker>,
}

impl Handle for wool_worker_list {
    const NAME: &'static str = "worker list";
}

/// A running watch over a pool, from wool_watch_new. Opaque; release with wool_watch_free.
#[allow(non_camel_case_types)]
pub struct wool_watch {
    watch: Watch,
    /// The credentials events are judged for (wool_watch_new_admitted).
    credentials: Option<WorkerCredentials>,
    /// The worker of the last event handed out, kept alive until the next call.
    last: Mutex<Option<OwnedWorker>>,
    /// Set by wool_watch_free; `wake` then ends the waits of wool_watch_next calls running.
    freed: AtomicBool,
    wake: tokio::sync::Notify,
}

impl Handle for wool_watch {
    const NAME: &'static str = "watch";

    fn freed(&self) {
        self.freed.store(true, Ordering::SeqCst);
        self.wake.notify_waiters();
    }
}

impl wool_watch {
    /// The next event within `timeout` (`None`: no limit), or `None` when nothing happened in
    /// that time or the watch was freed meanwhile (which ends the wait at once).
    ///
    /// Errors: as `Watch::next_timeout`; the runtime's start failure.
    fn next_event(&self, timeout: Option<Duration>) -> Result<Option<DiscoveryEvent>, Error> {
        if timeout == Some(Duration::ZERO) {
            return self.watch.next_timeout(timeout);
        }
        runtime::block_on(async {
            let freed = self.wake.notified();
            let mut freed = std::pin::pin!(freed);
            freed.as_mut().enable();
            if self.freed.load(Ordering::SeqCst) {
                return Ok(None);
            }
            let next = std::pin::pin!(self.watch.next());
            let either = async {
                match futures_util::future::select(next, freed).await {
                    futures_util::future::Either::Left((event, _)) => event.map(Some),
                    futures_util::future::Either::Right(((), _)) => Ok(None),
                }
            };
            match timeout {
                None => either.await,
                Some(limit) => tokio::time::timeout(limit, either)
                    .await
                    .unwrap_or(Ok(None)),
            }
        })?
    }
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
        WOOL_DISCOVERY_DNS => Err(Error::invalid_argument(
            "WOOL_DISCOVERY_DNS needs a port: list with wool_discover_dns (DNS discovery cannot \
             watch)",
        )),
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
/// Each worker's `refusal` is the admission gate's verdict for a caller without credentials
/// (as wool_discover_admitted with NULL credentials).
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
        unsafe { discover(namespace_, backend, listen_seconds, None, out) }
    })
}

/// As wool_discover, each worker's `refusal` and `refusal_reason` being the admission gate's
/// verdict (as Wool's WorkerProxy's) for a caller holding `credentials` (NULL = none):
/// security (with credentials only workers advertising `secure`, without only plaintext ones),
/// then version, then identity (with a peers policy from wool_credentials_with_peers, only a
/// worker advertising an accepted name). Refused workers are listed, so that a host can say
/// why; wool_connect_worker and wool_worker_list_connect refuse to connect them.
///
/// Returns as wool_discover.
///
/// # Safety
/// As wool_discover; `credentials` NULL or a handle.
#[no_mangle]
pub unsafe extern "C" fn wool_discover_admitted(
    namespace_: *const c_char,
    backend: c_int,
    listen_seconds: f64,
    credentials: *const wool_credentials,
    out: *mut *mut wool_worker_list,
) -> wool_status {
    ffi_panic_boundary!("wool_discover_admitted", {
        // SAFETY: the caller's contract above.
        let credentials = wool_credentials::copy_of(credentials)?;
        // SAFETY: the caller's contract above.
        unsafe {
            discover(
                namespace_,
                backend,
                listen_seconds,
                credentials.as_ref(),
                out,
            )
        }
    })
}

/// wool_discover and wool_discover_admitted.
///
/// # Safety
/// As wool_discover.
unsafe fn discover(
    namespace_: *const c_char,
    backend: c_int,
    listen_seconds: f64,
    credentials: Option<&WorkerCredentials>,
    out: *mut *mut wool_worker_list,
) -> Result<(), Error> {
    {
        // SAFETY: the caller's contract above.
        let namespace = unsafe { try_str(namespace_, "namespace") }?;
        // SAFETY: the caller's contract above.
        let out = unsafe { try_mut(out, "out") }?;
        let listen = seconds_or_default(listen_seconds, "listen_seconds")?;
        let workers = discovery(namespace, backend, listen)?.list()?;
        set_list(out, &workers, credentials)
    }
}

/// `value` seconds as a duration, `None` for 0 (the default).
///
/// Errors: InvalidArgument for a negative, NaN, infinite or too large `value`, named `what`.
fn seconds_or_default(value: f64, what: &str) -> Result<Option<Duration>, Error> {
    // `try_from_secs_f64` refuses NaN, negative values and ones too large for a Duration.
    let duration = Duration::try_from_secs_f64(value)
        .ok()
        .filter(|_| value.is_finite())
        .ok_or_else(|| {
            Error::invalid_argument(format!(
                "{what} must be 0 (the default) or positive finite seconds, got {value}"
            ))
        })?;
    Ok(Some(duration).filter(|d| !d.is_zero()))
}

/// Writes the list of `workers`, each with the gate's verdict for `credentials`, to `*out`.
///
/// Errors: as `handles::insert`.
fn set_list(
    out: &mut *mut wool_worker_list,
    workers: &[DiscoveredWorker],
    credentials: Option<&WorkerCredentials>,
) -> Result<(), Error> {
    handles::set_handle(
        out,
        wool_worker_list {
            workers: workers
                .iter()
                .map(|worker| OwnedWorker::new(worker, credentials))
                .collect(),
        },
    )
}

/// Lists the workers at every address the DNS name `name` resolves to (A and AAAA records, e.g.
/// a Kubernetes headless Service), each at `port`, and writes the list to `*out`, sorted by
/// address (`ip:port`, `[ip]:port` for IPv6). A name that exists with no A/AAAA records
/// (NOERROR, no answer) lists as empty; a name that does not exist (NXDOMAIN) fails. The
/// lookup uses the system's resolver configuration and hosts file and waits at most
/// `timeout_seconds` (0 = the default, 5 s); an answer with more than 10,000 addresses fails.
/// Blocks the calling thread.
///
/// A DNS record tells only the address: `uid` is the nil UUID, `pid` 0, `version` "", `tags_json`
/// `[]`, `extra_json` `{}`, `secure` false and `identity` the DNS name. Such a record is the
/// caller's own naming, not an advertisement: the admission gate skips its security and version
/// rules (the caller's credentials decide TLS) and a peers policy is applied to the DNS name;
/// `refusal` is the verdict for `credentials` (NULL = none). Connect a listed worker with
/// wool_worker_list_connect, which verifies its certificate against the DNS name unless the
/// credentials name another (wool_connect_worker, given the `wool_worker_info` alone, cannot
/// tell a DNS record and refuses it on version).
///
/// Returns WOOL_STATUS_INVALID_ARGUMENT (NULL or non-UTF-8 `name`, a `name` that is not a DNS
/// name, e.g. with a `:port` in it, `port` 0, a negative, NaN or infinite `timeout_seconds`,
/// NULL `out`) or WOOL_STATUS_TRANSIENT (the name does not exist: the message says "NAME does
/// not resolve"; the resolver configuration cannot be read, the lookup fails otherwise or times
/// out, too many addresses); `*out` is left untouched on failure.
///
/// # Safety
/// `name` must be NULL or NUL-terminated; `credentials` NULL or a handle; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn wool_discover_dns(
    name: *const c_char,
    port: u16,
    timeout_seconds: f64,
    credentials: *const wool_credentials,
    out: *mut *mut wool_worker_list,
) -> wool_status {
    ffi_panic_boundary!("wool_discover_dns", {
        // SAFETY (all): the caller's contract above.
        let name = unsafe { try_str(name, "name") }?;
        let credentials = wool_credentials::copy_of(credentials)?;
        let out = unsafe { try_mut(out, "out") }?;
        let mut dns = DnsDiscovery::new(name, port)?;
        if let Some(timeout) = seconds_or_default(timeout_seconds, "timeout_seconds")? {
            dns = dns.timeout(timeout);
        }
        let workers = dns.list()?;
        set_list(out, &workers, credentials.as_ref())
    })
}

/// Makes a handle to the worker at `index` in `list` and writes it to `*out`, as
/// wool_connect_worker, but from the whole record: the worker's advertised channel options
/// (local registry records carry them) tighten `options` (NULL = Wool's defaults); an
/// advertised value never loosens one of the caller's (the receive limit is never raised).
/// No I/O.
///
/// Returns WOOL_STATUS_INVALID_ARGUMENT when `list` or `out` is NULL, `index` is out of range,
/// or the admission gate refuses the worker for `credentials` (its refusal in the message).
///
/// # Safety
/// `list`, `credentials` and `options` NULL or handles; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn wool_worker_list_connect(
    list: *const wool_worker_list,
    index: usize,
    credentials: *const wool_credentials,
    options: *const wool_channel_options,
    out: *mut *mut wool_connection,
) -> wool_status {
    ffi_panic_boundary!("wool_worker_list_connect", {
        // SAFETY (all): the caller's contract above.
        let list = handles::get(list, "list")?;
        let credentials = wool_credentials::copy_of(credentials)?;
        let options = wool_channel_options::copy_of(options)?;
        let out = unsafe { try_mut(out, "out") }?;
        let owned = list.workers.get(index).ok_or_else(|| {
            Error::invalid_argument(format!(
                "index {index} is out of range (the list holds {})",
                list.workers.len()
            ))
        })?;
        let connection = owned
            .worker
            .connect(credentials.as_ref(), options.unwrap_or_default())?;
        handles::set_handle(out, wool_connection::new(connection))
    })
}

/// The number of workers in `list` (0 for NULL; 0 for a freed list or a handle of another
/// type, which also sets the thread's last error).
///
/// # Safety
/// None beyond the handle rules (docs/C-API.md, "Handles").
#[no_mangle]
pub unsafe extern "C" fn wool_worker_list_count(list: *const wool_worker_list) -> usize {
    ffi_panic_boundary!("wool_worker_list_count", {
        if list.is_null() {
            return 0;
        }
        match handles::get(list, "list") {
            Ok(list) => list.workers.len(),
            Err(error) => {
                super::last_error::record("wool_worker_list_count", &error);
                0
            }
        }
    })
}

/// The worker at `index` in `list`, valid until the list is freed (a pointer into the list,
/// which the handle table cannot check: do not use it after wool_worker_list_free); NULL when
/// `list` is NULL or `index` is out of range, and NULL for a freed list or a handle of another
/// type, which also sets the thread's last error.
///
/// # Safety
/// None beyond the handle rules (docs/C-API.md, "Handles").
#[no_mangle]
pub unsafe extern "C" fn wool_worker_list_get(
    list: *const wool_worker_list,
    index: usize,
) -> *const wool_worker_info {
    ffi_panic_boundary!("wool_worker_list_get", {
        if list.is_null() {
            return std::ptr::null();
        }
        match handles::get(list, "list") {
            // The table keeps the list (and so the worker) until wool_worker_list_free.
            Ok(list) => list
                .workers
                .get(index)
                .map_or(std::ptr::null(), |worker| &worker.info as *const _),
            Err(error) => {
                super::last_error::record("wool_worker_list_get", &error);
                std::ptr::null()
            }
        }
    })
}

/// Releases a list and every worker in it; NULL is a no-op; a second free (or a handle of
/// another type) does nothing but set the thread's last error. Pointers from
/// wool_worker_list_get are invalid afterwards.
///
/// # Safety
/// None beyond the handle rules (docs/C-API.md, "Handles").
#[no_mangle]
pub unsafe extern "C" fn wool_worker_list_free(list: *mut wool_worker_list) {
    ffi_panic_boundary!("wool_worker_list_free", {
        free_handle("wool_worker_list_free", list, "list");
    })
}

/// Makes a handle to a discovered worker and writes it to `*out`, as Wool's WorkerProxy reaches
/// a worker it admitted. The worker must pass the admission gate for `credentials` (see
/// wool_discover_admitted): with credentials it must advertise `secure` and is reached over
/// TLS with them (never in plaintext because the record says so), without it must be
/// plaintext; its `version` must be a compatible PEP 440 version (NULL is refused); under a
/// peers policy its `identity` must be an accepted name. The certificate is verified against
/// the credentials' identity when set, else (under a peers policy) the advertised identity,
/// else the address: with no policy the advertised identity is ignored. `options` NULL =
/// Wool's defaults (the advertised options are not in wool_worker_info: use
/// wool_worker_list_connect for them). No I/O.
///
/// Returns WOOL_STATUS_INVALID_ARGUMENT when `worker` or `out` is NULL, its address is NULL,
/// not UTF-8 or not a target, the name to verify is not a DNS name or IP address, or the gate
/// refuses the worker (its refusal in the message).
///
/// # Safety
/// `worker` must be NULL or point to a wool_worker_info whose `address`, `version` and
/// `identity` are NULL or NUL-terminated; `credentials` NULL or a handle; `options` NULL or a handle;
/// `out` NULL or writable.
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
        let version = unsafe { super::try_optional_str(worker.version, "worker->version") }?;
        let credentials = wool_credentials::copy_of(credentials)?;
        let options = wool_channel_options::copy_of(options)?;
        let out = unsafe { try_mut(out, "out") }?;
        let discovered = DiscoveredWorker {
            address: address.to_owned(),
            secure: worker.secure,
            identity: identity.filter(|i| !i.is_empty()).map(str::to_owned),
            version: version.unwrap_or_default().to_owned(),
            ..placeholder()
        };
        let connection: WorkerConnection =
            discovered.connect(credentials.as_ref(), options.unwrap_or_default())?;
        handles::set_handle(out, wool_connection::new(connection))
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
        origin: Default::default(),
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
        unsafe { watch_new(namespace_, backend, None, out) }
    })
}

/// As wool_watch_new, each event's worker carrying the admission gate's verdict for a caller
/// holding `credentials` (NULL = none; copied, so they may be freed right after), as
/// wool_discover_admitted.
///
/// Returns as wool_watch_new.
///
/// # Safety
/// As wool_watch_new; `credentials` NULL or a handle.
#[no_mangle]
pub unsafe extern "C" fn wool_watch_new_admitted(
    namespace_: *const c_char,
    backend: c_int,
    credentials: *const wool_credentials,
    out: *mut *mut wool_watch,
) -> wool_status {
    ffi_panic_boundary!("wool_watch_new_admitted", {
        // SAFETY: the caller's contract above.
        let credentials = wool_credentials::copy_of(credentials)?;
        // SAFETY: the caller's contract above.
        unsafe { watch_new(namespace_, backend, credentials, out) }
    })
}

/// wool_watch_new and wool_watch_new_admitted.
///
/// # Safety
/// As wool_watch_new.
unsafe fn watch_new(
    namespace_: *const c_char,
    backend: c_int,
    credentials: Option<WorkerCredentials>,
    out: *mut *mut wool_watch,
) -> Result<(), Error> {
    // SAFETY: the caller's contract above.
    let namespace = unsafe { try_str(namespace_, "namespace") }?;
    // SAFETY: the caller's contract above.
    let out = unsafe { try_mut(out, "out") }?;
    let watch = discovery(namespace, backend, None)?.watch()?;
    handles::set_handle(
        out,
        wool_watch {
            watch,
            credentials,
            last: Mutex::new(None),
            freed: AtomicBool::new(false),
            wake: tokio::sync::Notify::new(),
        },
    )
}

/// Waits up to `timeout_seconds` (0 = do not wait, INFINITY = as long as it takes) for the
/// watch's next event and writes its kind to `*out_kind` (WOOL_DISCOVERY_EVENT_*) and its
/// worker to `*out_worker`, valid until the next wool_watch_next on this watch or
/// wool_watch_free. When nothing happened in time: WOOL_DISCOVERY_EVENT_NONE and NULL; the
/// same, at once, when another thread frees the watch during the wait.
///
/// Returns WOOL_STATUS_INVALID_ARGUMENT for a NULL argument, a freed watch or a handle of
/// another type, or a negative or NaN timeout, or
/// WOOL_STATUS_TRANSIENT once the watch has ended (its backend stopped, e.g. the multicast DNS
/// responder failed; every event before that was handed out): free it and start another.
///
/// # Safety
/// `out_kind` and `out_worker` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn wool_watch_next(
    watch: *const wool_watch,
    timeout_seconds: f64,
    out_kind: *mut c_int,
    out_worker: *mut *const wool_worker_info,
) -> wool_status {
    ffi_panic_boundary!("wool_watch_next", {
        // SAFETY (all): the caller's contract above.
        let watch = handles::get(watch, "watch")?;
        let out_kind = unsafe { try_mut(out_kind, "out_kind") }?;
        let out_worker = unsafe { try_mut(out_worker, "out_worker") }?;
        if timeout_seconds.is_nan() || timeout_seconds < 0.0 {
            return Err(Error::invalid_argument(format!(
                "timeout_seconds must be 0, positive or INFINITY, got {timeout_seconds}"
            )));
        }
        let timeout = Duration::try_from_secs_f64(timeout_seconds).ok();
        let event = watch.next_event(timeout)?;
        let mut last = watch.last.lock().unwrap_or_else(|e| e.into_inner());
        let (kind, worker) = match event {
            None => (WOOL_DISCOVERY_EVENT_NONE, None),
            Some(DiscoveryEvent::Added(w)) => (WOOL_DISCOVERY_EVENT_ADDED, Some(w)),
            Some(DiscoveryEvent::Updated(w)) => (WOOL_DISCOVERY_EVENT_UPDATED, Some(w)),
            Some(DiscoveryEvent::Dropped(w)) => (WOOL_DISCOVERY_EVENT_DROPPED, Some(w)),
        };
        *last = worker
            .as_ref()
            .map(|w| OwnedWorker::new(w, watch.credentials.as_ref()));
        *out_kind = kind;
        *out_worker = last
            .as_ref()
            .map_or(std::ptr::null(), |w| &w.info as *const _);
        Ok(())
    })
}

/// Stops a watch and releases it; NULL is a no-op; a second free (or a handle of another type)
/// does nothing but set the thread's last error. A wool_watch_next waiting on the watch in
/// another thread returns at once as if its timeout had passed (WOOL_DISCOVERY_EVENT_NONE);
/// the watch goes away after it. Its events' workers are invalid afterwards.
///
/// # Safety
/// None beyond the handle rules (docs/C-API.md, "Handles").
#[no_mangle]
pub unsafe extern "C" fn wool_watch_free(watch: *mut wool_watch) {
    ffi_panic_boundary!("wool_watch_free", {
        free_handle("wool_watch_free", watch, "watch");
    })
}
