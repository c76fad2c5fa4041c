"""`WorkerCredentials`: TLS credentials for reaching TLS workers (``wool_credentials``)."""

from __future__ import annotations

import ctypes
import os

from . import _ffi
from ._convert import _c_path, _c_text
from ._errors import _check
from ._ffi import Library


class WorkerCredentials:
    """TLS credentials for reaching TLS workers, like ``wool.WorkerCredentials``: the CA the
    worker's certificate must chain to and, for mutual TLS, this client's key and certificate.

    Make them with `from_pem` or `from_files` (``reloadable=True`` for files that are
    rotated: read again when they change); the PEM is checked there, so bad PEM fails at
    once with `ValueError`. A `WorkerConnection` keeps its own copy (of reloadable
    credentials: one that reads the same files); the native credentials are released when
    this object is garbage-collected.
    """

    def __init__(self, library: Library, handle: _ffi.CredentialsPtr, mutual: bool,
                 identity: str | None, reloadable: bool = False):
        """Internal: use `from_pem` or `from_files`."""
        self._library = library
        self._handle = handle
        #: True for mutual TLS (this client presents a certificate), False for one-way TLS.
        self.mutual = mutual
        #: The name the worker's certificate is verified against instead of the dialed host.
        self.identity = identity
        #: True when the files are read again when they change (``from_files(reloadable=True)``).
        self.reloadable = reloadable

    @classmethod
    def from_pem(
        cls,
        ca_pem: str | bytes,
        key_pem: str | bytes | None = None,
        cert_pem: str | bytes | None = None,
        mutual: bool = True,
        identity: str | None = None,
    ) -> WorkerCredentials:
        """Credentials from PEM text (str or bytes).

        :param ca_pem: one or more CA certificates the worker's certificate must chain to.
        :param key_pem: this client's private key, for mutual TLS (note: key before cert,
            as in Wool).
        :param cert_pem: this client's certificate chain, for mutual TLS.
        :param mutual: True = mutual TLS (key and certificate required); False = one-way
            TLS (the client only verifies the worker; key and certificate are ignored).
        :param identity: the subject-alternative name (DNS name or IP address) to verify the
            worker against instead of the dialed host; None or "" = the dialed host.
        :raises ValueError: libwool's message: no certificate or key in a PEM, mutual TLS
            without key or certificate, text not UTF-8, a bad identity, or a NUL in a text.
        :raises TypeError: a text that is neither str nor bytes.
        """
        library = _ffi.default()
        return cls._make(
            library,
            library.wool_credentials_from_pem,
            _c_text(ca_pem, "ca_pem"),
            _c_text(key_pem, "key_pem"),
            _c_text(cert_pem, "cert_pem"),
            mutual,
            identity,
        )

    @classmethod
    def from_files(
        cls,
        ca_path: str | os.PathLike[str],
        key_path: str | os.PathLike[str] | None = None,
        cert_path: str | os.PathLike[str] | None = None,
        mutual: bool = True,
        identity: str | None = None,
        *,
        reloadable: bool = False,
    ) -> WorkerCredentials:
        """As `from_pem`, reading the PEM from files (``ca_path``, and for mutual TLS
        ``key_path`` and ``cert_path``: key before cert, as in Wool).

        :param reloadable: False = the files are read once, now. True = they are read again
            when they change, as with Wool's ``WorkerCredentialsProvider(reloadable=True)``:
            for certificates rotated on disk (replace each file whole, by renaming a new file
            over it). At most once a second a call on a connection made with them looks at
            the files (``stat``), and when one changed reads them all again; the connection's
            next calls dial with the new material, and the pooled channel made with the old
            material is retired once the calls still running on it end. New material that
            fails the checks (a half-written file, a key that does not match its certificate)
            is refused and the previous material kept; it is tried again a second later.
            Mutual or one-way TLS stays as made.
        :raises ValueError: as `from_pem`, and when a file cannot be read (libwool's message
            names it); the files are read and checked now, reloadable or not.
        :raises TypeError: a path that is not str, bytes or os.PathLike.
        """
        library = _ffi.default()
        reloadable = bool(reloadable)
        return cls._make(
            library,
            library.wool_credentials_from_files_reloadable if reloadable
            else library.wool_credentials_from_files,
            _c_path(ca_path, "ca_path"),
            _c_path(key_path, "key_path"),
            _c_path(cert_path, "cert_path"),
            mutual,
            identity,
            reloadable,
        )

    @classmethod
    def _make(cls, library, make, ca, key, cert, mutual, identity,
              reloadable=False) -> WorkerCredentials:
        mutual = bool(mutual)
        if identity is not None and not isinstance(identity, str):
            raise TypeError(f"identity must be str or None, not {type(identity).__name__}")
        handle = _ffi.CredentialsPtr()
        status = make(ca, key, cert, mutual, _c_text(identity, "identity"), ctypes.byref(handle))
        _check(library, status)
        return cls(library, handle, mutual, identity, reloadable)

    def with_peers(self, *names: str) -> WorkerCredentials:
        """A copy of these credentials carrying a peers policy, as Wool's
        ``WorkerCredentialsProvider(peers=...)`` (``wool_credentials_with_peers``): discovery
        (`libwool.fleet.discover`, `libwool.fleet.connect_worker`) then admits a discovered
        worker only if it advertises one of `names` (each trimmed of surrounding whitespace),
        and verifies its certificate against that name unless these credentials carry an
        `identity`, which always wins. A worker advertising no name is refused. Unlike Wool,
        a blank name or no name at all is refused rather than leaving the policy unset.

        :raises ValueError: no name, more than 4096, or a name that is blank, longer than 253
            bytes or holds a NUL (libwool's message).
        :raises TypeError: a name that is not str.
        """
        if not names:
            raise ValueError("with_peers() needs at least one name")
        texts = [_c_text(_check_peer(name), "peer name") for name in names]
        array = (ctypes.c_char_p * len(texts))(*texts)
        handle = _ffi.CredentialsPtr()
        _check(self._library, self._library.wool_credentials_with_peers(
            self._handle, array, len(texts), ctypes.byref(handle)))
        made = type(self)(self._library, handle, self.mutual, self.identity, self.reloadable)
        made.peers = tuple(sorted({name.strip() for name in names}))
        return made

    #: The names of the peers policy (`with_peers`), or None.
    peers: tuple[str, ...] | None = None

    def __del__(self) -> None:
        # No call can be using the handle now: wool_connect runs while a WorkerConnection
        # under construction holds a reference to this object.
        handle = getattr(self, "_handle", None)
        if handle:
            self._handle = None
            self._library.wool_credentials_free(handle)

    def __repr__(self) -> str:
        kind = "mutual TLS" if self.mutual else "one-way TLS"
        extra = f", identity={self.identity!r}" if self.identity else ""
        extra += ", reloadable" if self.reloadable else ""
        return f"<WorkerCredentials {kind}{extra}>"


def _check_peer(name: object) -> str:
    if not isinstance(name, str):
        raise TypeError(f"a peer name must be str, not {type(name).__name__}")
    return name
