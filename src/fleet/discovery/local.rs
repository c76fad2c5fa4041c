//! `LocalDiscovery`: the shared-memory registry Wool 0.15.7's `LocalDiscovery` keeps on one host
//! (`wool/runtime/discovery/local.py`). This file is the only one that knows the format.
//!
//! - The namespace's registry is the POSIX shared-memory segment `/dev/shm/<h(namespace)>`: a
//!   16-byte header (`"WLD1"`, the slot capacity as a little-endian u32, zeros), then
//!   `capacity` 16-byte slots, each a worker's UUID bytes or all zeros.
//! - Each worker's record is the segment `/dev/shm/<h(uuid hex)>`: a native-endian u32 length,
//!   then that many bytes of a serialized `WorkerMetadata`.
//! - `h(s)`: the first 30 characters of the unpadded URL-safe base64 of SHA-256(s).
//! - Writers touch `$TMPDIR/wool-<namespace>/notify` after each change; readers rescan then,
//!   without the writers' lock, so a record may be missing or half-written: it is skipped and
//!   read again on the next change.
//!
//! Segments are read with `pread(2)`, never mapped: a writer shrinking or unlinking one cannot
//! fault this process. They stay open between scans (see `OpenSegments`).
//!
//! Anyone on the host can create a segment under any free name in `/dev/shm`, so a segment is
//! read only when it is owned by this process's effective uid and writable by nobody else
//! (no group or other write bit); anything else is refused with a `tracing` warning. Wool's
//! own segments pass: Python's `shared_memory` creates them with mode 0600, owned by the
//! pool's user. A scan reads at most [`MAX_REGISTRY_SLOTS`] slots and keeps at most
//! [`MAX_OPEN_RECORDS`] record descriptors open, only for records that decoded.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::ErrorKind as IoErrorKind;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use notify::Watcher;
use prost::Message;
use sha2::Digest;
use uuid::Uuid;

use super::{sorted, start_watch, DiscoveredWorker, Roster, Watch};
use crate::connection::{Error, ErrorKind};
use crate::protocol::WorkerMetadata;

const HEADER_MAGIC: &[u8; 4] = b"WLD1";
const SLOT_BYTES: usize = 16;
/// Where Linux keeps POSIX shared-memory segments (`shm_open("/name")`).
const SHM_DIR: &str = "/dev/shm";
/// The most slots one scan reads from a registry: 16,384 (Wool's default capacity is 128). A
/// registry declaring more is read up to this many, with a warning: each slot costs an open
/// attempt per scan, and a registry's size is whoever wrote it's to choose.
pub const MAX_REGISTRY_SLOTS: usize = 16_384;
/// The most of a registry read: its header and [`MAX_REGISTRY_SLOTS`] slots.
const MAX_REGISTRY_BYTES: usize = SLOT_BYTES + MAX_REGISTRY_SLOTS * SLOT_BYTES;
/// The most record descriptors kept open between scans (twice Wool's default capacity, well
/// under the usual 1,024 soft limit on a process's descriptors); records past it, and records
/// that did not decode, are closed after each read.
pub const MAX_OPEN_RECORDS: usize = 256;
/// The most of a record read: 1 MiB (Wool's default block is 1,024 bytes).
const MAX_RECORD_BYTES: usize = 1 << 20;
/// How often a watch rescans when no change notification arrived (a missed inotify event, a
/// registry created after the watch started, a writer that died mid-change).
const RESCAN_INTERVAL: Duration = Duration::from_secs(1);

/// Discovery through a Wool pool's shared-memory registry on this host (Wool's
/// `LocalDiscovery(namespace)`): sees the workers of every pool started with that namespace on
/// this machine, e.g. `WorkerPool(spawn=4, discovery=LocalDiscovery("batch"))`.
#[derive(Debug, Clone)]
pub struct LocalDiscovery {
    namespace: String,
    shm_dir: PathBuf,
    notify_dir: PathBuf,
    /// Segments kept open between scans (shared by clones, e.g. a watch's thread).
    open: Arc<OpenSegments>,
}

impl PartialEq for LocalDiscovery {
    fn eq(&self, other: &Self) -> bool {
        (&self.namespace, &self.shm_dir) == (&other.namespace, &other.shm_dir)
    }
}

impl Eq for LocalDiscovery {}

/// The registry and the records of the last scan, kept open so that a scan reads each with
/// `pread` and checks with `fstat` that it was not unlinked (Wool re-creates a vanished
/// record under the same name): two system calls a worker instead of open, read and close,
/// and no name to hash again. Records of workers no longer registered are closed.
#[derive(Default)]
struct OpenSegments {
    segments: Mutex<Segments>,
}

#[derive(Default)]
struct Segments {
    registry: Option<std::fs::File>,
    records: HashMap<Uuid, (PathBuf, Option<std::fs::File>)>,
    /// Where segments are read: reused by every read of every scan.
    buffer: Vec<u8>,
    /// Records the last scan skipped (logged at warning level only when this changes).
    skipped: usize,
}

impl std::fmt::Debug for OpenSegments {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenSegments").finish_non_exhaustive()
    }
}

impl LocalDiscovery {
    /// The registry of `namespace` (any non-empty string without NUL, as in Wool). No I/O.
    ///
    /// Errors: [`ErrorKind::InvalidArgument`] for an empty namespace or one containing NUL or
    /// `/` (Wool's notification directory is named after it).
    pub fn new(namespace: &str) -> Result<Self, Error> {
        check_namespace(namespace)?;
        // Python's `tempfile.gettempdir()`, resolved as Wool resolves it.
        let tmp = std::env::temp_dir();
        let tmp = tmp.canonicalize().unwrap_or(tmp);
        Ok(Self {
            namespace: namespace.to_owned(),
            shm_dir: PathBuf::from(SHM_DIR),
            notify_dir: tmp.join(format!("wool-{namespace}")),
            open: Arc::default(),
        })
    }

    /// The namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The workers registered now, sorted by address. A namespace with no registry on this
    /// host (no pool started with it, or every pool gone) lists as empty. The registry's
    /// segments stay open (one descriptor per worker) until this value and its clones are
    /// dropped, so that later listings cost two system calls per worker.
    ///
    /// Errors: [`ErrorKind::Transient`] when the registry exists but cannot be read (e.g. no
    /// permission).
    pub fn list(&self) -> Result<Vec<DiscoveredWorker>, Error> {
        self.scan().map(sorted)
    }

    /// Watches the registry: reports every worker present, then joins, changes and leaves as
    /// Wool's writers publish them (on their change notification, and at the latest within a
    /// second). A registry that appears later is picked up.
    ///
    /// Errors: [`ErrorKind::Transient`] when the watch thread cannot be started.
    pub fn watch(&self) -> Result<Watch, Error> {
        let (wake_tx, wake_rx) = flume::bounded::<()>(1);
        // Wool's subscriber makes the directory so that its watch has something to watch.
        let _ = std::fs::create_dir_all(&self.notify_dir);
        let watcher = notify::recommended_watcher(move |_event| {
            let _ = wake_tx.try_send(());
        })
        .and_then(|mut watcher| {
            watcher.watch(&self.notify_dir, notify::RecursiveMode::NonRecursive)?;
            Ok(watcher)
        });
        let watcher = match watcher {
            Ok(watcher) => Some(watcher),
            Err(error) => {
                tracing::warn!(
                    directory = %self.notify_dir.display(),
                    %error,
                    "cannot watch Wool's notification directory; rescanning every second"
                );
                None
            }
        };
        let discovery = self.clone();
        start_watch(move |feed| {
            let _watcher = watcher;
            let mut roster = Roster::default();
            loop {
                match discovery.scan() {
                    Ok(scan) => {
                        for event in roster.replace(scan) {
                            if !feed.send(event) {
                                return;
                            }
                        }
                    }
                    Err(error) => tracing::warn!(%error, "registry scan failed"),
                }
                // Wait for a notification or the rescan interval, whichever first; end when
                // the watch is dropped.
                let woke = flume::Selector::new()
                    .recv(&wake_rx, |_| false)
                    .recv(&feed.stop, |_| true)
                    .wait_timeout(RESCAN_INTERVAL);
                if matches!(woke, Ok(true)) || feed.stopped_within(Duration::ZERO) {
                    return;
                }
            }
        })
    }

    /// One pass over the registry, in slot order.
    fn scan(&self) -> Result<Vec<DiscoveredWorker>, Error> {
        let mut open = self.open.segments.lock().unwrap_or_else(|e| e.into_inner());
        let Segments {
            registry,
            records,
            buffer,
            skipped,
        } = &mut *open;
        let registry_path = self.shm_dir.join(short_hash(&self.namespace));
        // The user every segment must belong to: asked once a scan, not once a segment.
        // SAFETY: geteuid has no preconditions and cannot fail.
        let euid = unsafe { libc::geteuid() };
        let registry =
            match read_segment(&registry_path, registry, buffer, MAX_REGISTRY_BYTES, euid) {
                Ok(Some(length)) => buffer[..length].to_vec(),
                Ok(None) => {
                    records.clear();
                    return Ok(Vec::new());
                }
                Err(error) => {
                    tracing::warn!(
                        namespace = %self.namespace,
                        registry = %registry_path.display(),
                        "cannot read the registry: {error}"
                    );
                    return Err(Error::new(
                        ErrorKind::Transient,
                        None,
                        format!(
                            "cannot read the registry of namespace {:?} ({}): {error}",
                            self.namespace,
                            registry_path.display()
                        ),
                    ));
                }
            };
        let Some(header) = registry_header(&registry) else {
            tracing::debug!(namespace = %self.namespace, "registry header not yet written");
            return Ok(Vec::new());
        };
        if header.capacity > MAX_REGISTRY_SLOTS {
            tracing::warn!(
                namespace = %self.namespace,
                declared = header.capacity,
                "the registry declares more slots than a scan reads; reading the first {MAX_REGISTRY_SLOTS}"
            );
        }
        let mut slots: Vec<Uuid> = header.slots.collect();
        slots.sort_unstable();
        slots.dedup();
        let mut kept_open = records.values().filter(|(_, file)| file.is_some()).count();
        let mut skips = Skips::default();
        let workers: Vec<DiscoveredWorker> = slots
            .iter()
            .filter_map(|&uid| {
                let (path, file) = records.entry(uid).or_insert_with(|| {
                    let name = short_hash(&uid.simple().to_string());
                    (self.shm_dir.join(name), None)
                });
                let was_open = file.is_some();
                let worker = self
                    .read_record(uid, path, file, buffer, euid)
                    .map_err(|why| skips.note(&self.namespace, uid, why))
                    .ok();
                // Keep the descriptor only for a record that decoded, and only up to the cap.
                if worker.is_none() || (!was_open && kept_open >= MAX_OPEN_RECORDS) {
                    *file = None;
                }
                match (was_open, file.is_some()) {
                    (false, true) => kept_open += 1,
                    (true, false) => kept_open -= 1,
                    _ => {}
                }
                worker
            })
            .collect();
        skips.report(&self.namespace, skipped);
        // Every slot now has its record entry: more entries than slots means workers that left.
        if records.len() > slots.len() {
            let registered: std::collections::HashSet<&Uuid> = slots.iter().collect();
            records.retain(|uid, _| registered.contains(uid));
        }
        Ok(workers)
    }

    /// The record of the worker in a slot, or why it cannot be read.
    fn read_record(
        &self,
        slot_uid: Uuid,
        path: &Path,
        file: &mut Option<std::fs::File>,
        buffer: &mut Vec<u8>,
        euid: libc::uid_t,
    ) -> Result<DiscoveredWorker, String> {
        let bytes = match read_segment(path, file, buffer, MAX_RECORD_BYTES, euid) {
            Ok(Some(length)) => &buffer[..length],
            Ok(None) => return Err("its record segment is missing".into()),
            Err(error) => return Err(format!("its record cannot be read: {error}")),
        };
        match decode_record(bytes) {
            Ok(worker) if worker.uid == slot_uid => Ok(worker),
            Ok(worker) => Err(format!("the record names another worker, {}", worker.uid)),
            Err(why) => Err(why),
        }
    }
}

/// The records one scan skipped: each logged at debug level, and one warning for the scan when
/// their number differs from the last scan's (a registry full of garbage, up to 16,384 slots,
/// makes one line, not one a slot at every sweep).
#[derive(Default)]
struct Skips {
    count: usize,
    first: Option<(Uuid, String)>,
}

impl Skips {
    fn note(&mut self, namespace: &str, worker: Uuid, why: String) {
        tracing::debug!(namespace, %worker, "skipping a registry record: {why}");
        self.count += 1;
        self.first.get_or_insert((worker, why));
    }

    fn report(self, namespace: &str, last: &mut usize) {
        if self.count != *last {
            if let Some((worker, why)) = &self.first {
                tracing::warn!(
                    namespace,
                    skipped = self.count,
                    "skipping registry records that cannot be read (worker {worker}: {why}; \
                     each at debug level)"
                );
            }
        }
        *last = self.count;
    }
}

/// Rejects namespaces Wool's local backend could not have made.
fn check_namespace(namespace: &str) -> Result<(), Error> {
    if namespace.is_empty() || namespace.contains(['\0', '/']) {
        return Err(Error::invalid_argument(format!(
            "namespace must be a non-empty string without NUL or '/', got {namespace:?}"
        )));
    }
    Ok(())
}

/// Reads a whole segment into `buffer` (grown as needed, never shrunk, so a scan allocates once)
/// and returns its length, at most `limit` bytes; `Ok(None)` when it does not exist. Keeps it
/// open in `file` for the next read, which then costs an `fstat` (reopening when the segment
/// was unlinked since) and a `pread`.
///
/// Anything else found under a segment's name is refused, never waited on or read without
/// end: it is opened without following a symbolic link and without blocking (a FIFO would
/// block `open`), and must be a regular file owned by `euid` (this process's effective uid, see
/// [`owned_by`]); `limit` bounds what a huge one can make this process allocate.
fn read_segment(
    path: &Path,
    file: &mut Option<std::fs::File>,
    buffer: &mut Vec<u8>,
    limit: usize,
    euid: libc::uid_t,
) -> std::io::Result<Option<usize>> {
    use std::os::unix::fs::{FileExt, OpenOptionsExt};
    let mut stat = None;
    if let Some(open) = file {
        let now = fstat(open)?;
        if now.st_nlink == 0 {
            *file = None;
        } else {
            stat = Some(now);
        }
    }
    let open = match file {
        Some(open) => open,
        None => {
            let opened = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(path);
            match opened {
                Ok(opened) => {
                    stat = Some(fstat(&opened)?);
                    file.insert(opened)
                }
                Err(error) if error.kind() == IoErrorKind::NotFound => return Ok(None),
                Err(error) => return Err(error),
            }
        }
    };
    let stat = stat.expect("stat taken above");
    if stat.st_mode & libc::S_IFMT != libc::S_IFREG {
        *file = None;
        return Err(std::io::Error::new(
            IoErrorKind::InvalidData,
            "not a regular file (not a shared-memory segment of Wool's)",
        ));
    }
    if let Err(why) = owned_by(&stat, euid) {
        *file = None;
        return Err(std::io::Error::new(IoErrorKind::PermissionDenied, why));
    }
    let size = usize::try_from(stat.st_size)
        .unwrap_or(usize::MAX)
        .min(limit);
    if buffer.len() < size {
        buffer.resize(size, 0);
    }
    let mut filled = 0;
    while filled < size {
        match open.read_at(&mut buffer[filled..size], filled as u64) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(error) if error.kind() == IoErrorKind::Interrupted => {}
            Err(error) => return Err(error),
        }
    }
    Ok(Some(filled))
}

/// Whether a segment may be trusted: owned by `euid` (this process's effective uid) and not
/// writable by group or others (Wool's own segments are 0600, owned by the pool's user).
/// Checked on every read, open or kept open: a kept segment's mode can change under us.
fn owned_by(stat: &libc::stat, euid: libc::uid_t) -> Result<(), String> {
    if stat.st_uid != euid {
        return Err(format!(
            "refused: owned by uid {}, not by this process's user (uid {euid})",
            stat.st_uid
        ));
    }
    let mode = stat.st_mode & 0o7777;
    if mode & 0o022 != 0 {
        return Err(format!(
            "refused: writable by group or others (mode {mode:04o}; Wool makes 0600)"
        ));
    }
    Ok(())
}

/// `fstat(2)`: the plain call, cheaper than the `statx` that `File::metadata` makes.
fn fstat(file: &std::fs::File) -> std::io::Result<libc::stat> {
    use std::os::fd::AsRawFd;
    let mut stat = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: a valid descriptor and a buffer for one `stat`.
    if unsafe { libc::fstat(file.as_raw_fd(), stat.as_mut_ptr()) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fstat succeeded, so it filled the buffer.
    Ok(unsafe { stat.assume_init() })
}

/// A registry's header: the capacity it declares and its non-empty slots (the first
/// [`MAX_REGISTRY_SLOTS`] at most, within what was read).
struct RegistryHeader<I> {
    capacity: usize,
    slots: I,
}

/// The header and non-empty slots of a registry, or `None` when its header is not (yet) Wool's.
fn registry_header(registry: &[u8]) -> Option<RegistryHeader<impl Iterator<Item = Uuid> + '_>> {
    if registry.len() < SLOT_BYTES || &registry[..4] != HEADER_MAGIC {
        return None;
    }
    let capacity = u32::from_le_bytes(registry[4..8].try_into().ok()?) as usize;
    let end = SLOT_BYTES + capacity.min(MAX_REGISTRY_SLOTS) * SLOT_BYTES;
    let end = end.min(registry.len());
    Some(RegistryHeader {
        capacity,
        slots: registry[SLOT_BYTES..end]
            .chunks_exact(SLOT_BYTES)
            .filter(|slot| slot.iter().any(|&b| b != 0))
            .map(|slot| Uuid::from_bytes(slot.try_into().expect("16-byte chunks"))),
    })
}

/// The non-empty slots of a registry, or `None` when its header is not (yet) Wool's.
#[cfg(test)]
fn registry_slots(registry: &[u8]) -> Option<impl Iterator<Item = Uuid> + '_> {
    registry_header(registry).map(|header| header.slots)
}

/// A worker record: length-prefixed `WorkerMetadata`; the error says why it was refused.
fn decode_record(bytes: &[u8]) -> Result<DiscoveredWorker, String> {
    let prefix: [u8; 4] = bytes
        .get(..4)
        .and_then(|p| p.try_into().ok())
        .ok_or("shorter than its length prefix")?;
    let length = u32::from_ne_bytes(prefix) as usize;
    let body = bytes
        .get(4..4usize.saturating_add(length))
        .ok_or_else(|| format!("length {length} runs past the segment (half-written?)"))?;
    if length == 0 {
        return Err("empty (half-written?)".into());
    }
    let metadata =
        WorkerMetadata::decode(body).map_err(|e| format!("not a WorkerMetadata message: {e}"))?;
    from_metadata(metadata)
}

/// Wool's `WorkerMetadata.from_protobuf`. Advertised channel options out of range are
/// dropped with a warning (the caller's options are then used).
pub(super) fn from_metadata(metadata: WorkerMetadata) -> Result<DiscoveredWorker, String> {
    let uid = Uuid::parse_str(&metadata.uid)
        .map_err(|_| format!("uid {:?} is not a UUID", metadata.uid))?;
    if metadata.address.is_empty() {
        return Err("no address".into());
    }
    let options = match metadata
        .connection
        .as_ref()
        .map(super::admission::advertised_options)
    {
        None => None,
        Some(Ok(options)) => Some(options),
        Some(Err(why)) => {
            tracing::warn!(worker = %uid, "ignoring the worker's advertised channel options: {why}");
            None
        }
    };
    Ok(DiscoveredWorker {
        uid,
        address: metadata.address,
        pid: metadata.pid,
        version: metadata.version,
        tags: metadata.tags.into_iter().collect::<BTreeSet<_>>(),
        extra: metadata.extra.into_iter().collect::<BTreeMap<_, _>>(),
        secure: metadata.secure,
        identity: Some(metadata.identity).filter(|identity| !identity.is_empty()),
        options,
        origin: Default::default(),
    })
}

/// Wool's `_short_hash`: the first 30 characters of the unpadded URL-safe base64 of SHA-256.
fn short_hash(text: &str) -> String {
    let digest = sha2::Sha256::digest(text.as_bytes());
    let mut encoded = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(digest);
    encoded.truncate(30);
    encoded
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_hash_matches_wools() {
        // python3 -c 'import wool.runtime.discovery.local as l; print(l._short_hash("batch"))'
        assert_eq!(short_hash("batch"), "S7JO_JZBr8Xe0cp36rtuL88GLSESzN");
        assert_eq!(short_hash("batch").len(), 30);
    }

    #[test]
    fn registry_headers_and_slots() {
        let mut registry = vec![0u8; 16 + 3 * 16];
        assert!(registry_slots(&registry).is_none(), "no magic: not ready");
        registry[..4].copy_from_slice(HEADER_MAGIC);
        registry[4..8].copy_from_slice(&3u32.to_le_bytes());
        registry[32..48].copy_from_slice(&[7; 16]);
        let slots: Vec<_> = registry_slots(&registry).unwrap().collect();
        assert_eq!(slots, vec![Uuid::from_bytes([7; 16])]);
        // A capacity larger than the segment stops at the segment's end.
        registry[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(registry_slots(&registry).unwrap().count(), 1);
    }

    #[test]
    fn bad_records_are_refused_with_a_reason() {
        assert!(decode_record(&[1, 0]).unwrap_err().contains("prefix"));
        assert!(decode_record(&[9, 0, 0, 0, 1])
            .unwrap_err()
            .contains("half-written"));
        assert!(decode_record(&[0, 0, 0, 0]).unwrap_err().contains("empty"));
        let mut junk = 3u32.to_ne_bytes().to_vec();
        junk.extend([0xff, 0xff, 0xff]);
        assert!(decode_record(&junk).unwrap_err().contains("WorkerMetadata"));
        let foreign = WorkerMetadata {
            uid: "not-a-uuid".into(),
            address: "127.0.0.1:1".into(),
            ..WorkerMetadata::default()
        }
        .encode_to_vec();
        let mut record = (foreign.len() as u32).to_ne_bytes().to_vec();
        record.extend(foreign);
        assert!(decode_record(&record).unwrap_err().contains("not a UUID"));
    }

    /// A writer into a shared buffer, to read the log lines a scan emits.
    #[derive(Clone, Default)]
    struct Log(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl std::io::Write for Log {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn record(metadata: &WorkerMetadata) -> Vec<u8> {
        let body = metadata.encode_to_vec();
        let mut record = (body.len() as u32).to_ne_bytes().to_vec();
        record.extend(body);
        record.resize(1024, 0);
        record
    }

    /// Given a registry (in Wool's format, in a scratch directory standing for /dev/shm) whose
    /// slots name a good record, a missing one, a half-written one, one naming another worker
    /// and one of garbage, when it is listed twice, then only the good worker is listed and each
    /// bad slot is skipped with a debug line at each scan, under one warning for the first scan
    /// (the number skipped did not change at the second).
    #[test]
    fn half_written_missing_and_foreign_records_are_skipped_with_a_log_line() {
        let shm = tempfile::tempdir().unwrap();
        let discovery = LocalDiscovery {
            shm_dir: shm.path().to_path_buf(),
            ..LocalDiscovery::new("scratch").unwrap()
        };
        let uids: Vec<Uuid> = (0..5).map(|_| Uuid::new_v4()).collect();
        let mut registry = vec![0u8; 16 + 8 * 16];
        registry[..4].copy_from_slice(HEADER_MAGIC);
        registry[4..8].copy_from_slice(&8u32.to_le_bytes());
        for (i, uid) in uids.iter().enumerate() {
            registry[16 + 16 * (i + 1)..][..16].copy_from_slice(uid.as_bytes());
        }
        std::fs::write(shm.path().join(short_hash("scratch")), &registry).unwrap();
        let segment = |uid: &Uuid| shm.path().join(short_hash(&uid.simple().to_string()));
        let good = WorkerMetadata {
            uid: uids[0].to_string(),
            address: "127.0.0.1:4000".into(),
            pid: 42,
            version: "0.15.7".into(),
            tags: vec!["gpu".into()],
            identity: "worker-0".into(),
            secure: true,
            ..WorkerMetadata::default()
        };
        std::fs::write(segment(&uids[0]), record(&good)).unwrap();
        // uids[1]: no record segment at all.
        let mut half = record(&good);
        half.truncate(10);
        std::fs::write(segment(&uids[2]), half).unwrap();
        std::fs::write(segment(&uids[3]), record(&good)).unwrap(); // names uids[0]
        std::fs::write(segment(&uids[4]), [3, 0, 0, 0, 0xff, 0xff, 0xff]).unwrap();
        let log = Log::default();
        let writer = log.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .with_max_level(tracing::Level::DEBUG)
            .finish();
        let (listed, again) = tracing::subscriber::with_default(subscriber, || {
            (discovery.list().unwrap(), discovery.list().unwrap())
        });
        assert_eq!(listed, again);
        assert_eq!(listed.len(), 1, "{listed:?}");
        let worker = &listed[0];
        assert_eq!(worker.uid, uids[0]);
        assert_eq!(worker.address, "127.0.0.1:4000");
        assert_eq!(worker.identity.as_deref(), Some("worker-0"));
        assert!(worker.secure && worker.tags.contains("gpu"));
        let log = String::from_utf8(log.0.lock().unwrap().clone()).unwrap();
        // Each skip at debug level at each scan; one warning, for the first scan only.
        assert_eq!(
            log.matches("skipping a registry record").count(),
            8,
            "{log}"
        );
        assert_eq!(log.matches(" WARN ").count(), 1, "{log}");
        assert!(log.contains("skipped=4"), "{log}");
        for why in [
            "missing",
            "half-written",
            "another worker",
            "WorkerMetadata",
        ] {
            assert!(log.contains(why), "no line about {why}: {log}");
        }
    }

    /// Given a listing that kept a record open, when Wool re-creates that record under the same
    /// name (its publisher reclaims a vanished block) or rewrites it in place, then the next
    /// listing reads the new content; a worker that left is forgotten.
    #[test]
    fn records_kept_open_are_read_afresh_when_rewritten_or_recreated() {
        let shm = tempfile::tempdir().unwrap();
        let discovery = LocalDiscovery {
            shm_dir: shm.path().to_path_buf(),
            ..LocalDiscovery::new("reopen").unwrap()
        };
        let uid = Uuid::new_v4();
        let mut registry = vec![0u8; 16 + 2 * 16];
        registry[..4].copy_from_slice(HEADER_MAGIC);
        registry[4..8].copy_from_slice(&2u32.to_le_bytes());
        registry[16..32].copy_from_slice(uid.as_bytes());
        let registry_path = shm.path().join(short_hash("reopen"));
        std::fs::write(&registry_path, &registry).unwrap();
        let segment = shm.path().join(short_hash(&uid.simple().to_string()));
        let at = |address: &str| WorkerMetadata {
            uid: uid.to_string(),
            address: address.into(),
            ..WorkerMetadata::default()
        };
        std::fs::write(&segment, record(&at("127.0.0.1:1"))).unwrap();
        assert_eq!(discovery.list().unwrap()[0].address, "127.0.0.1:1");
        std::fs::write(&segment, record(&at("127.0.0.1:2"))).unwrap(); // in place
        assert_eq!(discovery.list().unwrap()[0].address, "127.0.0.1:2");
        std::fs::remove_file(&segment).unwrap(); // unlinked, then made anew
        std::fs::write(&segment, record(&at("127.0.0.1:3"))).unwrap();
        assert_eq!(discovery.list().unwrap()[0].address, "127.0.0.1:3");
        std::fs::remove_file(&segment).unwrap();
        assert!(
            discovery.list().unwrap().is_empty(),
            "a missing record is skipped"
        );
        std::fs::remove_file(&registry_path).unwrap();
        assert!(discovery.list().unwrap().is_empty());
        assert!(discovery.open.segments.lock().unwrap().records.is_empty());
    }

    /// Given foreign things under the registry's or a record's name (a FIFO, a symbolic link to
    /// /dev/zero, a huge sparse file), when the namespace is listed, then the listing ends at
    /// once with an error or a skipped record: it never blocks on the FIFO or reads without end.
    #[test]
    fn foreign_files_under_segment_names_are_refused_not_waited_on() {
        let shm = tempfile::tempdir().unwrap();
        let discovery = LocalDiscovery {
            shm_dir: shm.path().to_path_buf(),
            ..LocalDiscovery::new("foreign").unwrap()
        };
        let registry_path = shm.path().join(short_hash("foreign"));
        let fifo = std::ffi::CString::new(registry_path.to_str().unwrap()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        let error = discovery.list().unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Transient);
        assert!(error.message().contains("not a regular file"), "{error}");
        std::fs::remove_file(&registry_path).unwrap();
        std::os::unix::fs::symlink("/dev/zero", &registry_path).unwrap();
        assert_eq!(discovery.list().unwrap_err().kind(), ErrorKind::Transient);
        std::fs::remove_file(&registry_path).unwrap();
        // A huge sparse registry: read up to the limit, then found not to be Wool's.
        let huge = std::fs::File::create(&registry_path).unwrap();
        huge.set_len(8 << 30).unwrap();
        assert!(discovery.list().unwrap().is_empty());
        drop(huge);
        // A slot whose record is a FIFO is skipped.
        let uid = Uuid::new_v4();
        let mut registry = vec![0u8; 32];
        registry[..4].copy_from_slice(HEADER_MAGIC);
        registry[4..8].copy_from_slice(&1u32.to_le_bytes());
        registry[16..32].copy_from_slice(uid.as_bytes());
        std::fs::write(&registry_path, &registry).unwrap();
        let record = shm.path().join(short_hash(&uid.simple().to_string()));
        let fifo = std::ffi::CString::new(record.to_str().unwrap()).unwrap();
        // SAFETY: as above.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        assert!(discovery.list().unwrap().is_empty());
    }

    /// A scratch registry (standing for /dev/shm) naming `records` in its first slots, each
    /// written as Wool writes one; returns the discovery and the record paths.
    fn scratch_registry(
        shm: &Path,
        namespace: &str,
        capacity: u32,
        records: &[WorkerMetadata],
    ) -> (LocalDiscovery, Vec<PathBuf>) {
        let discovery = LocalDiscovery {
            shm_dir: shm.to_path_buf(),
            ..LocalDiscovery::new(namespace).unwrap()
        };
        let mut registry = vec![0u8; 16 + 16 * records.len().max(1)];
        registry[..4].copy_from_slice(HEADER_MAGIC);
        registry[4..8].copy_from_slice(&capacity.to_le_bytes());
        let mut paths = Vec::new();
        for (i, metadata) in records.iter().enumerate() {
            let uid = Uuid::parse_str(&metadata.uid).unwrap();
            registry[16 + 16 * i..][..16].copy_from_slice(uid.as_bytes());
            let path = shm.join(short_hash(&uid.simple().to_string()));
            std::fs::write(&path, record(metadata)).unwrap();
            paths.push(path);
        }
        std::fs::write(shm.join(short_hash(namespace)), &registry).unwrap();
        (discovery, paths)
    }

    fn metadata(address: &str, version: &str, secure: bool, identity: &str) -> WorkerMetadata {
        WorkerMetadata {
            uid: Uuid::new_v4().to_string(),
            address: address.into(),
            pid: 1,
            version: version.into(),
            secure,
            identity: identity.into(),
            ..WorkerMetadata::default()
        }
    }

    fn credentials(identity: Option<&str>) -> crate::connection::WorkerCredentials {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let key = rcgen::KeyPair::generate().unwrap();
        let ca = params.self_signed(&key).unwrap();
        crate::connection::WorkerCredentials::from_pem(
            ca.pem().as_bytes(),
            None,
            None,
            false,
            identity,
        )
        .unwrap()
    }

    /// Given registry records saying plaintext, secure with identities "evil", "w1" and "w2",
    /// and versions "1.0.0" and "garbage", when a caller with credentials lists and connects,
    /// then the plaintext record is refused (its credentials are never dropped), the versions
    /// are refused, an advertised identity is pinned only under a peers policy that accepts
    /// it, a refused one names the accepted peers, and an explicit server name always wins.
    #[test]
    fn records_pass_wools_admission_gate_before_they_are_connected() {
        let shm = tempfile::tempdir().unwrap();
        let records = [
            metadata("127.0.0.1:4001", "0.15.7", false, ""),
            metadata("127.0.0.1:4002", "0.15.7", true, "evil"),
            metadata("127.0.0.1:4003", "0.15.7", true, "w1"),
            metadata("127.0.0.1:4004", "0.15.7", true, "w2"),
            metadata("127.0.0.1:4005", "1.0.0", true, "w1"),
            metadata("127.0.0.1:4006", "garbage", true, "w1"),
        ];
        let (discovery, _) = scratch_registry(shm.path(), "gate", 6, &records);
        let listed = discovery.list().unwrap();
        assert_eq!(listed.len(), 6);
        let [plain, evil, w1, w2, v1, garbage] = &listed[..] else {
            unreachable!()
        };
        let options = crate::connection::ChannelOptions::default;
        let given = credentials(None);
        // Security: the record never turns the caller's TLS off.
        let error = plain.connect(Some(&given), options()).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::InvalidArgument, "{error}");
        assert_eq!(
            plain.refusal(Some(&given)),
            Some(super::super::Refusal::Security {
                worker_secure: false
            })
        );
        assert!(plain.refusal(None).is_none());
        assert_eq!(evil.refusal(None).unwrap().arm(), "security");
        // Version.
        for (worker, parsable) in [(v1, true), (garbage, false)] {
            assert_eq!(
                worker.refusal(Some(&given)),
                Some(super::super::Refusal::Version {
                    advertised: worker.version.clone(),
                    parsable
                })
            );
            assert_eq!(
                worker.connect(Some(&given), options()).unwrap_err().kind(),
                ErrorKind::InvalidArgument
            );
        }
        // Identity, no policy: admitted, the advertisement ignored.
        let check = |w: &DiscoveredWorker, c: &crate::connection::WorkerCredentials| {
            super::super::admission::check(w, Some(c)).map(|a| a.pin)
        };
        assert_eq!(check(evil, &given), Ok(None));
        assert!(evil.connect(Some(&given), options()).is_ok());
        // A policy accepting w1.
        let gated = given.with_peers(crate::connection::Peers::name("w1").unwrap());
        assert_eq!(check(w1, &gated), Ok(Some("w1".to_string())));
        let refusal = w2.refusal(Some(&gated)).unwrap();
        assert_eq!(refusal.arm(), "identity");
        assert!(
            refusal.to_string().contains("accepted peers: w1"),
            "{refusal}"
        );
        assert!(w2
            .connect(Some(&gated), options())
            .unwrap_err()
            .message()
            .contains("\"w2\""));
        assert_eq!(evil.refusal(Some(&gated)).unwrap().arm(), "identity");
        // An explicit server name wins over the accepted advertisement.
        let explicit = credentials(Some("chosen.example"))
            .with_peers(crate::connection::Peers::names(["w1", "w2"]).unwrap());
        assert_eq!(check(w1, &explicit), Ok(None));
        let admission = super::super::admit(listed.clone(), Some(&explicit));
        assert_eq!(admission.admitted.len(), 2, "{admission:?}");
        assert_eq!(admission.refused.len(), 4);
    }

    /// Given a registry or a record owned by another user, or writable by group or others, when
    /// the namespace is listed, then it is refused with a log line (the registry: an error; a
    /// record: skipped), while 0600 and 0644 segments of this user read as Wool's own do.
    #[test]
    fn segments_of_other_users_or_writable_by_others_are_refused() {
        use std::os::unix::fs::PermissionsExt;
        let shm = tempfile::tempdir().unwrap();
        let records = [
            metadata("127.0.0.1:4001", "0.15.7", false, ""),
            metadata("127.0.0.1:4002", "0.15.7", false, ""),
            metadata("127.0.0.1:4003", "0.15.7", false, ""),
        ];
        let (discovery, paths) = scratch_registry(shm.path(), "owners", 3, &records);
        let registry = shm.path().join(short_hash("owners"));
        let mode = |path: &Path, mode: u32| {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap()
        };
        mode(&registry, 0o600);
        mode(&paths[0], 0o600);
        assert_eq!(discovery.list().unwrap().len(), 3);
        mode(&paths[1], 0o666);
        // SAFETY: geteuid cannot fail.
        let root = unsafe { libc::geteuid() } == 0;
        if root {
            std::os::unix::fs::chown(&paths[2], Some(65534), Some(65534)).unwrap();
        } else {
            mode(&paths[2], 0o620);
        }
        let log = Log::default();
        let writer = log.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .with_max_level(tracing::Level::DEBUG)
            .finish();
        let (listed, again) = tracing::subscriber::with_default(subscriber, || {
            (discovery.list().unwrap(), discovery.list().unwrap())
        });
        assert_eq!(listed, again);
        assert_eq!(listed.len(), 1, "{listed:?}");
        assert_eq!(listed[0].address, "127.0.0.1:4001");
        let text = String::from_utf8(log.0.lock().unwrap().clone()).unwrap();
        assert!(text.contains("writable by group or others"), "{text}");
        if root {
            assert!(text.contains("owned by uid 65534"), "{text}");
        }
        mode(&registry, 0o666);
        let error = discovery.list().unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Transient);
        assert!(
            error.message().contains("writable by group or others"),
            "{error}"
        );
        if root {
            mode(&registry, 0o600);
            std::os::unix::fs::chown(&registry, Some(65534), None).unwrap();
            let error = discovery.list().unwrap_err();
            assert!(error.message().contains("owned by uid 65534"), "{error}");
        }
    }

    /// Given a registry declaring 100,000 slots, every one naming a worker, 2,000 of them with
    /// garbage records and one with a good record, when it is listed twice, then a scan reads
    /// at most MAX_REGISTRY_SLOTS slots, and only the good record keeps a descriptor open.
    #[test]
    fn a_registry_declaring_more_slots_than_a_scan_reads_is_bounded() {
        let shm = tempfile::tempdir().unwrap();
        let declared = 100_000usize;
        let good = metadata("127.0.0.1:4001", "0.15.7", false, "");
        let (discovery, _) = scratch_registry(shm.path(), "huge", 1, std::slice::from_ref(&good));
        let mut registry = vec![0u8; 16 + 16 * declared];
        registry[..4].copy_from_slice(HEADER_MAGIC);
        registry[4..8].copy_from_slice(&(declared as u32).to_le_bytes());
        let good_uid = Uuid::parse_str(&good.uid).unwrap();
        registry[16..32].copy_from_slice(good_uid.as_bytes());
        for slot in 1..declared {
            let uid = Uuid::new_v4();
            registry[16 + 16 * slot..][..16].copy_from_slice(uid.as_bytes());
            if slot <= 2_000 {
                let path = shm.path().join(short_hash(&uid.simple().to_string()));
                std::fs::write(path, [3, 0, 0, 0, 0xff, 0xff, 0xff]).unwrap();
            }
        }
        std::fs::write(shm.path().join(short_hash("huge")), &registry).unwrap();
        for _ in 0..2 {
            let listed = discovery.list().unwrap();
            assert_eq!(listed.len(), 1);
            assert_eq!(listed[0].uid, good_uid);
            let open = discovery.open.segments.lock().unwrap();
            assert!(
                open.records.len() <= MAX_REGISTRY_SLOTS,
                "{}",
                open.records.len()
            );
            let descriptors = open.records.values().filter(|(_, f)| f.is_some()).count();
            assert_eq!(descriptors, 1, "garbage records keep no descriptor");
        }
    }

    #[test]
    fn namespaces_wool_could_not_have_made_are_refused() {
        for bad in ["", "a/b", "a\0b"] {
            assert_eq!(
                LocalDiscovery::new(bad).unwrap_err().kind(),
                ErrorKind::InvalidArgument
            );
        }
        assert!(LocalDiscovery::new("batch")
            .unwrap()
            .list()
            .unwrap()
            .is_empty());
    }
}
