//! `wool_credentials`: `wool_credentials_from_pem`, `wool_credentials_from_files`,
//! `wool_credentials_from_files_reloadable`, `wool_credentials_with_peers`,
//! `wool_credentials_free`.

use std::ffi::c_char;
use std::path::Path;

use super::handles::{self, Handle};
use super::{ffi_panic_boundary, free_handle, try_mut, try_optional_str, try_str, wool_status};
use libwool::connection::{Error, WorkerCredentials};

/// TLS credentials for reaching TLS workers: the CA the worker's certificate must chain to and,
/// for mutual TLS, the client's certificate and key. Opaque; made by
/// wool_credentials_from_pem or wool_credentials_from_files, released by
/// wool_credentials_free. wool_connect copies them, so they may be freed right after.
#[allow(non_camel_case_types)]
pub struct wool_credentials {
    pub(crate) inner: WorkerCredentials,
}

impl Handle for wool_credentials {
    const NAME: &'static str = "credentials";
}

impl wool_credentials {
    /// The credentials behind the optional handle `credentials` (NULL: none), copied (a copy
    /// shares reloadable material).
    ///
    /// Errors: InvalidArgument for a freed handle or one of another type.
    pub(crate) fn copy_of(credentials: *const Self) -> Result<Option<WorkerCredentials>, Error> {
        Ok(handles::get_optional(credentials, "credentials")?.map(|c| c.inner.clone()))
    }
}

/// The C texts both constructors take: the CA, for mutual TLS the key and certificate (ignored,
/// and allowed to be NULL, for one-way TLS), and the optional identity.
struct CredentialTexts<'a> {
    ca: &'a str,
    key: Option<&'a str>,
    cert: Option<&'a str>,
    identity: Option<&'a str>,
}

impl<'a> CredentialTexts<'a> {
    /// Checks and borrows `[ca, key, cert]` (named `names` in messages) and `identity`.
    ///
    /// # Safety
    /// Each pointer must be NULL or a NUL-terminated string that outlives `'a`.
    unsafe fn read(
        [ca, key, cert]: [*const c_char; 3],
        names: [&str; 3],
        mutual: bool,
        identity: *const c_char,
    ) -> Result<Self, libwool::connection::Error> {
        // SAFETY (all): the function's contract.
        let ca = unsafe { try_str(ca, names[0]) }?;
        let (key, cert) = if mutual {
            let key = unsafe { try_optional_str(key, names[1]) }?;
            let cert = unsafe { try_optional_str(cert, names[2]) }?;
            if key.is_none() || cert.is_none() {
                return Err(mutual_without_client(key.is_none(), cert.is_none(), names));
            }
            (key, cert)
        } else {
            (None, None)
        };
        let identity = unsafe { try_optional_str(identity, "identity") }?;
        Ok(Self {
            ca,
            key,
            cert,
            identity,
        })
    }
}

/// What mutual TLS without the client's key or certificate is told, in the caller's terms (the
/// bindings' defaults are mutual, so a caller who gave only the CA meets it first): what mutual
/// TLS needs, which argument is missing, and the two ways out.
fn mutual_without_client(
    no_key: bool,
    no_cert: bool,
    [_, key, cert]: [&str; 3],
) -> libwool::connection::Error {
    let missing = match (no_key, no_cert) {
        (true, true) => format!("neither {key} nor {cert} was given"),
        (true, false) => format!("{key} was not given"),
        _ => format!("{cert} was not given"),
    };
    libwool::connection::Error::invalid_argument(format!(
        "mutual TLS needs the client's key and certificate besides the CA, and {missing}: give \
         {key} and {cert}, or make one-way TLS credentials (mutual off), which need the CA only"
    ))
}

/// Makes credentials from PEM text (NUL-terminated) and writes them to `*out` on
/// WOOL_STATUS_OK. The PEM is checked here, so bad PEM fails now, not on the first call.
///
/// - `ca_pem`: one or more CA certificates the worker's certificate must chain to.
/// - `key_pem`, `cert_pem`: the client's private key and certificate chain, for mutual TLS;
///   may be NULL when `mutual` is false (one-way TLS: the client only verifies the worker),
///   and are then ignored.
/// - `identity`: the subject-alternative name to verify the worker against instead of the
///   dialed host; NULL or "" = the dialed host.
///
/// Returns WOOL_STATUS_INVALID_ARGUMENT when `ca_pem` or `out` is NULL, mutual TLS lacks the
/// key or certificate, a text is not UTF-8, a PEM holds no certificate or key, or `identity`
/// is not a DNS name or IP address.
///
/// # Safety
/// Each text must be NULL or NUL-terminated; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn wool_credentials_from_pem(
    ca_pem: *const c_char,
    key_pem: *const c_char,
    cert_pem: *const c_char,
    mutual: bool,
    identity: *const c_char,
    out: *mut *mut wool_credentials,
) -> wool_status {
    ffi_panic_boundary!("wool_credentials_from_pem", {
        // SAFETY: the caller's contract above.
        let texts = unsafe {
            CredentialTexts::read(
                [ca_pem, key_pem, cert_pem],
                ["ca_pem", "key_pem", "cert_pem"],
                mutual,
                identity,
            )
        }?;
        let out = unsafe { try_mut(out, "out") }?;
        let inner = WorkerCredentials::from_pem(
            texts.ca.as_bytes(),
            texts.key.map(str::as_bytes),
            texts.cert.map(str::as_bytes),
            mutual,
            texts.identity,
        )?;
        handles::set_handle(out, wool_credentials { inner })
    })
}

/// As wool_credentials_from_pem, reading the PEM from files: `ca_path`, and for mutual TLS
/// `key_path` and `cert_path` (which may be NULL when `mutual` is false). Paths are
/// NUL-terminated UTF-8.
///
/// Returns WOOL_STATUS_INVALID_ARGUMENT as wool_credentials_from_pem, and when a file cannot
/// be read (the message names it).
///
/// # Safety
/// Each text must be NULL or NUL-terminated; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn wool_credentials_from_files(
    ca_path: *const c_char,
    key_path: *const c_char,
    cert_path: *const c_char,
    mutual: bool,
    identity: *const c_char,
    out: *mut *mut wool_credentials,
) -> wool_status {
    // SAFETY: the caller's contract above.
    unsafe {
        credentials_from_files(
            "wool_credentials_from_files",
            WorkerCredentials::from_files,
            [ca_path, key_path, cert_path],
            mutual,
            identity,
            out,
        )
    }
}

/// As wool_credentials_from_files, and the files are read again when they change (as Wool's
/// `WorkerCredentialsProvider(reloadable=True)`): at most once a second a call looks at them
/// (`stat`), and when one changed reads them again. Connections made with these credentials
/// then dial with the new material on their next call; the pooled channel made with the old
/// material is retired once the calls still running on it end. New material that fails the
/// checks (a half-written file, a key that does not match its certificate) is refused and the
/// previous material kept; it is tried again a second later. Mutual or one-way stays as made.
///
/// Returns WOOL_STATUS_INVALID_ARGUMENT as wool_credentials_from_files (the files are read and
/// checked now).
///
/// # Safety
/// Each text must be NULL or NUL-terminated; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn wool_credentials_from_files_reloadable(
    ca_path: *const c_char,
    key_path: *const c_char,
    cert_path: *const c_char,
    mutual: bool,
    identity: *const c_char,
    out: *mut *mut wool_credentials,
) -> wool_status {
    // SAFETY: the caller's contract above.
    unsafe {
        credentials_from_files(
            "wool_credentials_from_files_reloadable",
            WorkerCredentials::from_files_reloadable,
            [ca_path, key_path, cert_path],
            mutual,
            identity,
            out,
        )
    }
}

/// The signature of [`WorkerCredentials::from_files`] and its reloadable sibling.
type FromFiles = fn(
    &Path,
    Option<&Path>,
    Option<&Path>,
    bool,
    Option<&str>,
) -> Result<WorkerCredentials, libwool::connection::Error>;

/// What both file constructors do, `make` telling fixed from reloadable.
///
/// # Safety
/// As wool_credentials_from_files.
unsafe fn credentials_from_files(
    function: &'static str,
    make: FromFiles,
    paths: [*const c_char; 3],
    mutual: bool,
    identity: *const c_char,
    out: *mut *mut wool_credentials,
) -> wool_status {
    ffi_panic_boundary!(function, {
        // SAFETY: the caller's contract above.
        let texts = unsafe {
            CredentialTexts::read(
                paths,
                ["ca_path", "key_path", "cert_path"],
                mutual,
                identity,
            )
        }?;
        let out = unsafe { try_mut(out, "out") }?;
        let inner = make(
            Path::new(texts.ca),
            texts.key.map(Path::new),
            texts.cert.map(Path::new),
            mutual,
            texts.identity,
        )?;
        handles::set_handle(out, wool_credentials { inner })
    })
}

/// The most names wool_credentials_with_peers takes (the peers policy's own limit).
const MAX_PEER_NAMES: usize = 4096;

/// Makes a copy of `credentials` carrying a peers policy (Wool's `peers`) and writes it to
/// `*out`: discovery (wool_discover_admitted, wool_connect_worker) then admits a discovered
/// worker only if it advertises one of the `count` names in `peers` (each trimmed of
/// surrounding whitespace), and verifies its certificate against that name, unless the
/// credentials carry an identity, which always wins. A worker advertising no name is refused.
/// `credentials` is unchanged and may be freed independently; free the copy with
/// wool_credentials_free.
///
/// Returns WOOL_STATUS_INVALID_ARGUMENT when `credentials`, `peers`, an entry of it or `out`
/// is NULL, an entry is not UTF-8, blank or longer than 253 bytes, or `count` is 0 or more
/// than 4096 (an empty policy would admit nothing; Wool's would admit everything: both are
/// refused).
///
/// # Safety
/// `credentials` is a handle (a freed one is refused); `peers` NULL or an array of `count` pointers, each NULL
/// or NUL-terminated; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn wool_credentials_with_peers(
    credentials: *const wool_credentials,
    peers: *const *const c_char,
    count: usize,
    out: *mut *mut wool_credentials,
) -> wool_status {
    ffi_panic_boundary!("wool_credentials_with_peers", {
        // SAFETY (all): the caller's contract above.
        let credentials = handles::get(credentials, "credentials")?;
        let out = unsafe { try_mut(out, "out") }?;
        if peers.is_null() {
            return Err(libwool::connection::Error::invalid_argument(
                "peers is NULL",
            ));
        }
        if count == 0 || count > MAX_PEER_NAMES {
            return Err(libwool::connection::Error::invalid_argument(format!(
                "count must be 1 to {MAX_PEER_NAMES} peer names, got {count}"
            )));
        }
        let pointers = unsafe { std::slice::from_raw_parts(peers, count) };
        let names = pointers
            .iter()
            .enumerate()
            .map(|(i, &name)| unsafe { try_str(name, &format!("peers[{i}]")) })
            .collect::<Result<Vec<&str>, _>>()?;
        let policy = libwool::connection::Peers::names(names)?;
        handles::set_handle(
            out,
            wool_credentials {
                inner: credentials.inner.with_peers(policy),
            },
        )
    })
}

/// Releases credentials. NULL is a no-op; a second free (or a handle of another type) does
/// nothing but set the thread's last error. Connections made with them keep their own copy.
///
/// # Safety
/// None beyond the handle rules (docs/C-API.md, "Handles").
#[no_mangle]
pub unsafe extern "C" fn wool_credentials_free(credentials: *mut wool_credentials) {
    ffi_panic_boundary!("wool_credentials_free", {
        free_handle("wool_credentials_free", credentials, "credentials");
    })
}
