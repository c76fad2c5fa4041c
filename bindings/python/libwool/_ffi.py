"""Raw ctypes bindings to the C API of libwool (include/wool.h), and finding the library.

Nothing here is public: `libwool` wraps it. Every function of the header is declared with
its exact argtypes and restype; the opaque handle types get their own pointer types, so
ctypes refuses to pass a connection where credentials are expected.

The library is loaded with `ctypes.CDLL`, which releases the GIL around every foreign call:
a thread blocked in `wool_idle` or `wool_stop` does not stop other Python threads.
"""

from __future__ import annotations

import ctypes
import importlib.machinery
import os
import sys
import threading
from pathlib import Path

#: The environment variable naming the library file when `load` is given no path.
ENV_VAR = "LIBWOOL_PATH"

# Stable values of `wool_status` (wool.h); the binding compares against them.
OK = 0
INVALID_ARGUMENT = 1
IDLE_UNAVAILABLE = 2
TRANSIENT = 3
HANDSHAKE = 4
RPC_ERROR = 5
PANIC = 6
CANCELLED = 7

#: WOOL_COMPLETION_MESSAGE_BYTES: the size of `wool_completion.message`.
COMPLETION_MESSAGE_BYTES = 256


class wool_connection(ctypes.Structure):
    """Opaque `wool_connection`; only pointers to it exist."""


class wool_credentials(ctypes.Structure):
    """Opaque `wool_credentials`; only pointers to it exist."""


class wool_channel_options(ctypes.Structure):
    """Opaque `wool_channel_options`; only pointers to it exist."""


class wool_queue(ctypes.Structure):
    """Opaque `wool_queue` (completion queue); only pointers to it exist."""


class wool_completion(ctypes.Structure):
    """`wool_completion`: one finished call taken from a completion queue."""

    _fields_ = [
        ("tag", ctypes.c_uint64),
        ("call", ctypes.c_uint64),
        ("status", ctypes.c_int),  # wool_status
        ("rpc_code", ctypes.c_int32),
        ("seconds", ctypes.c_double),
        ("message", ctypes.c_char * COMPLETION_MESSAGE_BYTES),
    ]


class wool_completion_ex(ctypes.Structure):
    """`wool_completion_ex`: a completion as wool_queue_next_sized gives it (the
    `wool_completion` first, then its kind and a sweep's result count)."""

    _fields_ = [
        ("completion", wool_completion),
        ("kind", ctypes.c_uint32),  # COMPLETION_KIND_*
        ("reserved", ctypes.c_uint32),
        ("count", ctypes.c_uint64),
    ]


# WOOL_COMPLETION_KIND_*: wool_completion_ex.kind.
COMPLETION_KIND_IDLE = 1
COMPLETION_KIND_STOP = 2
COMPLETION_KIND_SWEEP = 3


class wool_poll_result(ctypes.Structure):
    """`wool_poll_result`: one worker's outcome in a sweep started with
    wool_idle_many_start."""

    _fields_ = [
        ("status", ctypes.c_int),  # wool_status
        ("rpc_code", ctypes.c_int32),
        ("seconds", ctypes.c_double),
        ("message", ctypes.c_char * COMPLETION_MESSAGE_BYTES),
    ]


class wool_idle_start_entry(ctypes.Structure):
    """`wool_idle_start_entry`: one idle poll for wool_idle_start_batch."""

    _fields_ = [
        ("conn", ctypes.POINTER(wool_connection)),
        ("timeout_seconds", ctypes.c_double),
        ("tag", ctypes.c_uint64),
    ]


class wool_worker_list(ctypes.Structure):
    """Opaque `wool_worker_list` (a listing from wool_discover); only pointers to it exist."""


class wool_watch(ctypes.Structure):
    """Opaque `wool_watch` (a running watch over a pool); only pointers to it exist."""


class wool_worker_info(ctypes.Structure):
    """`wool_worker_info`: one discovered worker (Wool's WorkerMetadata); every string is
    NUL-terminated UTF-8 owned by the list or watch it came from."""

    _fields_ = [
        ("uid", ctypes.c_char_p),
        ("address", ctypes.c_char_p),
        ("pid", ctypes.c_int32),
        ("version", ctypes.c_char_p),
        ("tags_json", ctypes.c_char_p),
        ("extra_json", ctypes.c_char_p),
        ("secure", ctypes.c_bool),
        ("identity", ctypes.c_char_p),
        # The admission gate's verdict (WOOL_DISCOVERY_REFUSAL_*) and why; never read by
        # wool_connect_worker.
        ("refusal", ctypes.c_int),
        ("refusal_reason", ctypes.c_char_p),
    ]


class wool_retire_policy(ctypes.Structure):
    """`wool_retire_policy`: the policy of one wool_retire_idle round."""

    _fields_ = [
        ("idle_threshold", ctypes.c_double),
        ("grace", ctypes.c_double),
        ("stop_timeout", ctypes.c_double),
        ("keep_min", ctypes.c_size_t),
        ("max_stops", ctypes.c_size_t),
        ("dry_run", ctypes.c_bool),
    ]


class wool_retire_decision(ctypes.Structure):
    """`wool_retire_decision`: what wool_retire_idle decided for one worker."""

    _fields_ = [
        ("reason", ctypes.c_int),
        ("retire", ctypes.c_bool),
        ("poll_status", ctypes.c_int),  # wool_status
        ("poll_rpc_code", ctypes.c_int32),
        ("idle_seconds", ctypes.c_double),
        ("stopped", ctypes.c_bool),
        ("stop_status", ctypes.c_int),  # wool_status
        ("stop_rpc_code", ctypes.c_int32),
        ("message", ctypes.c_char * COMPLETION_MESSAGE_BYTES),
    ]


# WOOL_DISCOVERY_*: backends of wool_discover / wool_watch_new, and wool_watch_next's kinds.
DISCOVERY_LOCAL = 0
DISCOVERY_LAN = 1
DISCOVERY_EVENT_NONE = 0
DISCOVERY_EVENT_ADDED = 1
DISCOVERY_EVENT_UPDATED = 2
DISCOVERY_EVENT_DROPPED = 3
# WOOL_DISCOVERY_REFUSAL_*: wool_worker_info.refusal, by Wool's reason words.
DISCOVERY_REFUSALS = {0: None, 1: "security", 2: "version", 3: "identity"}

#: SIZE_MAX: wool_retire_policy.max_stops for no limit.
SIZE_MAX = 2 ** (8 * ctypes.sizeof(ctypes.c_size_t)) - 1

ConnectionPtr = ctypes.POINTER(wool_connection)
QueuePtr = ctypes.POINTER(wool_queue)
CredentialsPtr = ctypes.POINTER(wool_credentials)
ChannelOptionsPtr = ctypes.POINTER(wool_channel_options)
WorkerListPtr = ctypes.POINTER(wool_worker_list)
WatchPtr = ctypes.POINTER(wool_watch)
WorkerInfoPtr = ctypes.POINTER(wool_worker_info)

_c_double_p = ctypes.POINTER(ctypes.c_double)
_wool_status = ctypes.c_int  # a C enum: int-sized

# name: (restype, argtypes), exactly as in include/wool.h.
PROTOTYPES: dict[str, tuple[object, list[object]]] = {
    "wool_version": (ctypes.c_char_p, []),
    "wool_connect": (
        _wool_status,
        [ctypes.c_char_p, CredentialsPtr, ctypes.POINTER(ConnectionPtr)],
    ),
    "wool_idle": (_wool_status, [ConnectionPtr, ctypes.c_double, _c_double_p]),
    "wool_stop": (_wool_status, [ConnectionPtr, ctypes.c_double, ctypes.c_double]),
    "wool_free": (None, [ConnectionPtr]),
    "wool_credentials_from_pem": (
        _wool_status,
        [
            ctypes.c_char_p,  # ca_pem
            ctypes.c_char_p,  # key_pem
            ctypes.c_char_p,  # cert_pem
            ctypes.c_bool,  # mutual
            ctypes.c_char_p,  # identity
            ctypes.POINTER(CredentialsPtr),
        ],
    ),
    "wool_credentials_from_files": (
        _wool_status,
        [
            ctypes.c_char_p,  # ca_path
            ctypes.c_char_p,  # key_path
            ctypes.c_char_p,  # cert_path
            ctypes.c_bool,  # mutual
            ctypes.c_char_p,  # identity
            ctypes.POINTER(CredentialsPtr),
        ],
    ),
    "wool_credentials_from_files_reloadable": (
        _wool_status,
        [
            ctypes.c_char_p,  # ca_path
            ctypes.c_char_p,  # key_path
            ctypes.c_char_p,  # cert_path
            ctypes.c_bool,  # mutual
            ctypes.c_char_p,  # identity
            ctypes.POINTER(CredentialsPtr),
        ],
    ),
    "wool_credentials_with_peers": (
        _wool_status,
        [
            CredentialsPtr,
            ctypes.POINTER(ctypes.c_char_p),  # peers
            ctypes.c_size_t,  # count
            ctypes.POINTER(CredentialsPtr),
        ],
    ),
    "wool_credentials_free": (None, [CredentialsPtr]),
    "wool_last_error": (ctypes.c_size_t, [ctypes.c_char_p, ctypes.c_size_t]),
    "wool_last_rpc_code": (ctypes.c_int32, []),
    "wool_status_name": (ctypes.c_char_p, [_wool_status]),
    "wool_channel_options_new": (_wool_status, [ctypes.POINTER(ChannelOptionsPtr)]),
    "wool_channel_options_free": (None, [ChannelOptionsPtr]),
    "wool_channel_options_set_max_receive_message_bytes": (
        _wool_status,
        [ChannelOptionsPtr, ctypes.c_size_t],
    ),
    "wool_channel_options_set_max_send_message_bytes": (
        _wool_status,
        [ChannelOptionsPtr, ctypes.c_size_t],
    ),
    "wool_channel_options_set_keepalive_interval": (
        _wool_status,
        [ChannelOptionsPtr, ctypes.c_double],
    ),
    "wool_channel_options_set_keepalive_timeout": (
        _wool_status,
        [ChannelOptionsPtr, ctypes.c_double],
    ),
    "wool_channel_options_set_keepalive_without_calls": (
        _wool_status,
        [ChannelOptionsPtr, ctypes.c_bool],
    ),
    "wool_channel_options_set_max_pings_without_data": (
        _wool_status,
        [ChannelOptionsPtr, ctypes.c_uint32],
    ),
    "wool_channel_options_set_max_concurrent_streams": (
        _wool_status,
        [ChannelOptionsPtr, ctypes.c_size_t],
    ),
    "wool_channel_options_set_connect_timeout": (
        _wool_status,
        [ChannelOptionsPtr, ctypes.c_double],
    ),
    "wool_connect_with_options": (
        _wool_status,
        [ctypes.c_char_p, CredentialsPtr, ChannelOptionsPtr, ctypes.POINTER(ConnectionPtr)],
    ),
    # Many calls at once: wool_idle_many_start is the sweep of fleet.sweep and aio.idle_many
    # (on a completion queue, cancellable); wool_idle_many checks an empty sweep's timeout.
    "wool_idle_many": (
        _wool_status,
        [
            ctypes.POINTER(ConnectionPtr),  # conns
            ctypes.c_size_t,  # count
            ctypes.c_double,  # timeout_seconds
            ctypes.c_size_t,  # max_in_flight
            _c_double_p,  # out_seconds
            ctypes.POINTER(_wool_status),  # out_statuses
            ctypes.POINTER(ctypes.c_int32),  # out_codes
        ],
    ),
    # The fleet calls: discovery, watches, handles to discovered workers, retire rounds.
    "wool_discover": (
        _wool_status,
        [ctypes.c_char_p, ctypes.c_int, ctypes.c_double, ctypes.POINTER(WorkerListPtr)],
    ),
    "wool_discover_admitted": (
        _wool_status,
        [ctypes.c_char_p, ctypes.c_int, ctypes.c_double, CredentialsPtr,
         ctypes.POINTER(WorkerListPtr)],
    ),
    "wool_discover_dns": (
        _wool_status,
        [ctypes.c_char_p, ctypes.c_uint16, ctypes.c_double, CredentialsPtr,
         ctypes.POINTER(WorkerListPtr)],
    ),
    "wool_worker_list_count": (ctypes.c_size_t, [WorkerListPtr]),
    "wool_worker_list_get": (WorkerInfoPtr, [WorkerListPtr, ctypes.c_size_t]),
    "wool_worker_list_free": (None, [WorkerListPtr]),
    "wool_connect_worker": (
        _wool_status,
        [WorkerInfoPtr, CredentialsPtr, ChannelOptionsPtr, ctypes.POINTER(ConnectionPtr)],
    ),
    "wool_worker_list_connect": (
        _wool_status,
        [WorkerListPtr, ctypes.c_size_t, CredentialsPtr, ChannelOptionsPtr,
         ctypes.POINTER(ConnectionPtr)],
    ),
    "wool_watch_new": (
        _wool_status,
        [ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(WatchPtr)],
    ),
    "wool_watch_new_admitted": (
        _wool_status,
        [ctypes.c_char_p, ctypes.c_int, CredentialsPtr, ctypes.POINTER(WatchPtr)],
    ),
    "wool_watch_next": (
        _wool_status,
        [WatchPtr, ctypes.c_double, ctypes.POINTER(ctypes.c_int),
         ctypes.POINTER(WorkerInfoPtr)],
    ),
    "wool_watch_free": (None, [WatchPtr]),
    "wool_retire_reason_name": (ctypes.c_char_p, [ctypes.c_int]),
    "wool_retire_idle": (
        _wool_status,
        [
            ctypes.POINTER(ConnectionPtr),  # conns
            ctypes.c_size_t,  # count
            ctypes.POINTER(wool_retire_policy),  # policy
            ctypes.c_double,  # poll_timeout_seconds
            ctypes.c_size_t,  # max_in_flight
            ctypes.POINTER(wool_retire_decision),  # out
        ],
    ),
    "wool_queue_new": (_wool_status, [ctypes.POINTER(QueuePtr)]),
    "wool_queue_free": (None, [QueuePtr]),
    "wool_queue_fd": (ctypes.c_int32, [QueuePtr]),
    "wool_idle_start": (
        _wool_status,
        [ConnectionPtr, QueuePtr, ctypes.c_double, ctypes.c_uint64,
         ctypes.POINTER(ctypes.c_uint64)],
    ),
    "wool_idle_start_batch": (
        _wool_status,
        [QueuePtr, ctypes.POINTER(wool_idle_start_entry), ctypes.c_size_t,
         ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_int)],
    ),
    "wool_stop_start": (
        _wool_status,
        [ConnectionPtr, QueuePtr, ctypes.c_double, ctypes.c_double, ctypes.c_uint64,
         ctypes.POINTER(ctypes.c_uint64)],
    ),
    "wool_cancel": (_wool_status, [QueuePtr, ctypes.c_uint64]),
    "wool_queue_next": (
        _wool_status,
        [QueuePtr, ctypes.POINTER(wool_completion), ctypes.c_size_t, ctypes.c_double,
         ctypes.POINTER(ctypes.c_size_t)],
    ),
    "wool_queue_next_sized": (
        _wool_status,
        [QueuePtr, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_double,
         ctypes.POINTER(ctypes.c_size_t)],
    ),
    "wool_idle_many_start": (
        _wool_status,
        [
            ctypes.POINTER(ConnectionPtr),  # conns
            ctypes.c_size_t,  # count
            ctypes.c_double,  # timeout_seconds
            ctypes.c_size_t,  # max_in_flight
            QueuePtr,  # queue
            ctypes.c_uint64,  # tag
            ctypes.POINTER(wool_poll_result),  # out_results
            ctypes.POINTER(ctypes.c_uint64),  # out_call
        ],
    ),
}


class LibraryNotFound(OSError):
    """libwool could not be loaded; the message lists every place tried and why it failed."""


class Library:
    """One loaded libwool: the `ctypes.CDLL` with every prototype declared.

    Handles made by one `Library` are released by the same one, so objects keep a reference
    to the `Library` they came from.
    """

    def __init__(self, path: str):
        self.path = path
        self.cdll = ctypes.CDLL(path)  # CDLL, not PyDLL: foreign calls release the GIL
        for name, (restype, argtypes) in PROTOTYPES.items():
            try:
                function = getattr(self.cdll, name)
            except AttributeError:
                raise LibraryNotFound(
                    f"{path} is not libwool's C API: it lacks the symbol {name}"
                ) from None
            function.restype = restype
            function.argtypes = argtypes
            setattr(self, name, function)

    @property
    def version(self) -> str:
        """The library's version, e.g. ``"0.1.0"``."""
        return self.wool_version().decode("utf-8")

    def status_name(self, status: int) -> str:
        """The C name of a `wool_status` value, e.g. ``"WOOL_STATUS_TRANSIENT"``."""
        return self.wool_status_name(status).decode("utf-8")

    def last_error(self) -> tuple[str, int]:
        """The calling thread's most recent failure: (message, gRPC code or -1).

        Thread-local in the library, so call it on the thread that made the failing call,
        right after it (ctypes runs foreign calls on the calling thread).
        """
        length = self.wool_last_error(None, 0)
        buffer = ctypes.create_string_buffer(length + 1)
        self.wool_last_error(buffer, length + 1)
        message = buffer.value.decode("utf-8", errors="replace")
        return message, int(self.wool_last_rpc_code())

    def __repr__(self) -> str:
        return f"<libwool {self.version} from {self.path}>"


def _library_file_name() -> str:
    if sys.platform == "darwin":
        return "libwool.dylib"
    if sys.platform == "win32":
        return "wool.dll"
    return "libwool.so"


#: The bundled library's file name without its suffix, inside this package (a wheel built by
#: ``pip install bindings/python`` puts libwool's cdylib there: setup.py).
BUNDLED_STEM = "_libwool"


def bundled_candidates() -> list[Path]:
    """Where a wheel (or an editable install) put the library, beside this module:
    ``_libwool.abi3.so`` and the other suffixes setuptools may give it, in the order the
    interpreter itself prefers them (``importlib.machinery.EXTENSION_SUFFIXES``)."""
    here = Path(__file__).resolve().parent
    return [here / (BUNDLED_STEM + suffix) for suffix in importlib.machinery.EXTENSION_SUFFIXES]


def repo_candidates() -> list[Path]:
    """A development fallback: this checkout's cargo outputs, release before debug, when this
    package is being used from its place in the repository (bindings/python/libwool/, three
    levels below the root); none for an installed copy."""
    package = Path(__file__).resolve().parent
    root = package.parents[2]
    if package.parent.parent.name != "bindings" or not (root / "Cargo.toml").is_file():
        return []
    name = _library_file_name()
    return [root / "target" / "release" / name, root / "target" / "debug" / name]


_lock = threading.Lock()
_loaded: dict[str, Library] = {}  # by real path: loading twice gives the same Library
_default: Library | None = None


def _reset_lock_after_fork() -> None:
    # A child forked while another thread held the lock would wait for it for ever.
    global _lock
    _lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_lock_after_fork)


def _open(path: str) -> Library:
    real = os.path.realpath(path)
    with _lock:
        library = _loaded.get(real)
        if library is None:
            library = _loaded[real] = Library(path)
        return library


def load(path: str | os.PathLike[str] | None = None) -> Library:
    """Load libwool and make it the default for new connections and credentials.

    Where it looks, first match only (an explicit choice that fails is an error, never a
    silent fallback): `path` when given; else the file named by the ``LIBWOOL_PATH``
    environment variable when set; else the library bundled in this package (what
    ``pip install bindings/python`` built); else, for the package used in place in a
    checkout, the repository's ``target/release`` then ``target/debug`` build.

    :raises LibraryNotFound: (an `OSError`) naming each place tried and why it failed.
    """
    global _default
    searching = path is None and not os.environ.get(ENV_VAR)
    bundled: list[Path] = []
    if path is not None:
        tried = [(f"argument path={os.fspath(path)!r}", os.fspath(path))]
    elif os.environ.get(ENV_VAR):
        tried = [(f"${ENV_VAR}={os.environ[ENV_VAR]!r}", os.environ[ENV_VAR])]
    else:
        bundled = [p for p in bundled_candidates() if p.exists()]
        tried = [(f"bundled {p}", str(p)) for p in bundled]
        tried += [(f"repository build {p}", str(p)) for p in repo_candidates()]
    failures = []
    if searching and not bundled:
        here = Path(__file__).resolve().parent
        failures.append(f"bundled {here / BUNDLED_STEM}.*: none (this copy was not built with it)")
    for label, candidate in tried:
        if searching and not os.path.exists(candidate):
            failures.append(f"{label}: no such file")
            continue
        try:
            library = _open(candidate)
        except OSError as e:
            failures.append(f"{label}: {e}")
            continue
        with _lock:
            _default = library
        return library
    hint = (
        f"install the package with the library bundled (`pip install bindings/python` in a "
        f"checkout; needs Rust), pass libwool.load(path), set {ENV_VAR}, or build the "
        f"library in the checkout with `cargo build -p libwool-capi`"
    )
    raise LibraryNotFound(
        "libwool not found; tried:\n  " + "\n  ".join(failures) + f"\n({hint})"
    )


def default() -> Library:
    """The library `load` chose last, loading it the default way on first use."""
    library = _default
    return library if library is not None else load()


if os.environ.get(ENV_VAR) and not os.path.exists(os.environ[ENV_VAR]):
    # An explicit choice that names nothing fails the import, naming the path: the library
    # itself loads on first use, and a later LibraryNotFound would point away from the cause.
    raise ImportError(
        f"libwool: ${ENV_VAR}={os.environ[ENV_VAR]!r}: no such file (it names the "
        f"libwool.so to load; unset it to use the library bundled in the package)",
        name="libwool",
        path=os.environ[ENV_VAR],
    )
