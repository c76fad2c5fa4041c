"""TLS and mutual TLS against the reference worker, with throwaway certificates (conftest.certs).

The worker's certificate (worker.pem) is for 127.0.0.1, ::1 and localhost, signed by ca.pem;
client.pem is a client certificate signed by ca.pem; rogue-ca.pem and rogue.pem belong to a
CA nobody trusts. The rotation tests (``reloadable=True``) move from `certs` to
conftest.next_certs, a second PKI of the same shape, while both sides keep polling.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

import libwool
from libwool import WorkerConnection, WorkerCredentials


def mtls_args(certs) -> list[Path | str]:
    """The reference worker's flags for mutual TLS with worker.pem, trusting ca.pem."""
    return [
        "--tls-ca", certs / "ca.pem",
        "--tls-cert", certs / "worker.pem",
        "--tls-key", certs / "worker.key",
    ]  # fmt: skip


@pytest.fixture
def mtls_worker(spawn_worker, certs):
    """A reference worker requiring client certificates signed by ca.pem."""
    return spawn_worker(*mtls_args(certs))


def client_files(certs, ca="ca", leaf="client", **kwargs) -> WorkerCredentials:
    return WorkerCredentials.from_files(
        certs / f"{ca}.pem", certs / f"{leaf}.key", certs / f"{leaf}.pem", **kwargs
    )


def test_mutual_tls_with_the_right_credentials_from_files(mtls_worker, certs):
    # Given a worker requiring client certificates, When the client presents one signed by
    # the worker's CA and trusts that CA, Then idle answers.
    with WorkerConnection(mtls_worker.address, client_files(certs)) as conn:
        assert conn.idle(timeout=5.0) >= 0.0


def test_mutual_tls_with_the_right_credentials_from_pem(mtls_worker, certs):
    credentials = WorkerCredentials.from_pem(
        (certs / "ca.pem").read_text(),        # str
        (certs / "client.key").read_bytes(),   # or bytes
        (certs / "client.pem").read_text(),
    )
    with WorkerConnection(mtls_worker.address, credentials) as conn:
        assert conn.idle(timeout=5.0) >= 0.0


def test_a_wrong_ca_is_a_handshake_error(mtls_worker, certs):
    # Given a client that trusts only the rogue CA, Then the worker's certificate is
    # refused by this client: HandshakeError (a TransientRpcError, as in Wool).
    with WorkerConnection(mtls_worker.address, client_files(certs, ca="rogue-ca")) as conn:
        with pytest.raises(libwool.HandshakeError) as caught:
            conn.idle(timeout=5.0)
    assert isinstance(caught.value, libwool.TransientRpcError)
    assert caught.value.code >= 0


def test_a_client_certificate_the_worker_rejects_never_succeeds(mtls_worker, certs):
    # Given a client certificate from the rogue CA, Then the worker refuses it with a TLS
    # alert after the TLS 1.3 handshake: a HandshakeError.
    with WorkerConnection(mtls_worker.address, client_files(certs, leaf="rogue")) as conn:
        with pytest.raises(libwool.HandshakeError):
            conn.idle(timeout=5.0)


def test_identity_overrides_the_name_the_worker_is_verified_against(mtls_worker, certs):
    # Given the worker dialed by IP, When identity="localhost" (in its SANs), Then it is
    # accepted; When identity names something else, Then HandshakeError.
    good = client_files(certs, identity="localhost")
    with WorkerConnection(mtls_worker.address, good) as conn:
        assert conn.idle(timeout=5.0) >= 0.0
    bad = client_files(certs, identity="other.example")
    with WorkerConnection(mtls_worker.address, bad) as conn:
        with pytest.raises(libwool.HandshakeError, match="other.example"):
            conn.idle(timeout=5.0)


def test_one_way_tls_needs_only_the_ca(spawn_worker, certs):
    # Given a worker asking no client certificate, When the client has only the CA
    # (mutual=False, no key or certificate), Then idle answers.
    worker = spawn_worker(
        "--tls-ca", certs / "ca.pem",
        "--tls-cert", certs / "worker.pem",
        "--tls-key", certs / "worker.key",
        "--one-way",
    )  # fmt: skip
    credentials = WorkerCredentials.from_files(certs / "ca.pem", mutual=False)
    assert not credentials.mutual
    with WorkerConnection(worker.address, credentials) as conn:
        assert conn.idle(timeout=5.0) >= 0.0


def test_one_way_credentials_against_a_mutual_tls_worker_fail(mtls_worker, certs):
    # The worker asks for a client certificate and, given none, refuses with a TLS alert.
    credentials = WorkerCredentials.from_files(certs / "ca.pem", mutual=False)
    with WorkerConnection(mtls_worker.address, credentials) as conn:
        with pytest.raises(libwool.HandshakeError):
            conn.idle(timeout=5.0)


def test_a_bad_identity_is_a_value_error_with_the_librarys_message(certs):
    with pytest.raises(ValueError, match=r"^wool_credentials_from_files: "):
        WorkerCredentials.from_files(certs / "ca.pem", mutual=False, identity="not a name!")


def test_mutual_credentials_from_the_ca_alone_ask_for_the_key_and_certificate(certs):
    # Given only a CA path (mutual TLS being the default), Then the message says what mutual
    # TLS needs and which arguments to give (or mutual=False), not only that a pointer is NULL;
    # the same whether or not the CA file exists.
    for ca in (certs / "ca.pem", "/nonexistent/ca.pem"):
        for make in (WorkerCredentials.from_files,
                     lambda ca: WorkerCredentials.from_files(ca, reloadable=True)):
            with pytest.raises(ValueError) as raised:
                make(ca)
            message = str(raised.value)
            assert "mutual TLS needs the client's key and certificate" in message, message
            assert "neither key_path nor cert_path was given" in message, message
            assert "one-way TLS credentials (mutual off)" in message, message
    with pytest.raises(ValueError, match=r"cert_path was not given: give key_path "
                                         r"and cert_path"):
        WorkerCredentials.from_files(certs / "ca.pem", certs / "client.key")
    with pytest.raises(ValueError, match=r"neither key_pem nor cert_pem was given"):
        WorkerCredentials.from_pem((certs / "ca.pem").read_bytes())


def test_stop_over_mutual_tls_retires_the_worker(mtls_worker, certs):
    with WorkerConnection(mtls_worker.address, client_files(certs)) as conn:
        conn.stop(grace=0.0, timeout=10.0)
    assert mtls_worker.wait(10) == 0


# ---------------------------------------------------------------- rotation (reloadable=True)

#: How long each rotation step is given: reloadable credentials look at their files at most
#: once a second, the reference worker within about 100 ms of a change.
SETTLE = 1.5


def replace_file(path: Path, data: bytes) -> None:
    """Replace `path`'s content whole, as a rotation does: `data` is written to a temporary
    file beside it, which is then renamed over it."""
    new = path.with_name(path.name + ".new")
    new.write_bytes(data)
    os.replace(new, path)


class TlsFiles:
    """One side's TLS files (ca.pem: the CA it trusts; cert.pem, key.pem: its leaf) in a
    directory of their own, copied from PEM files and replaced whole when rotated."""

    def __init__(self, directory: Path, ca: Path, cert: Path, key: Path):
        directory.mkdir()
        self.ca, self.cert, self.key = (directory / n for n in ("ca.pem", "cert.pem", "key.pem"))
        self.set_ca(ca)
        self.set_leaf(cert, key)

    def set_ca(self, *cas: Path) -> None:
        """Trust these CAs (one bundle file)."""
        replace_file(self.ca, b"".join(ca.read_bytes() for ca in cas))

    def set_leaf(self, cert: Path, key: Path) -> None:
        replace_file(self.cert, cert.read_bytes())
        replace_file(self.key, key.read_bytes())

    def worker_args(self) -> list[Path | str]:
        """The reference worker's flags for mutual TLS on these files."""
        return ["--tls-ca", self.ca, "--tls-cert", self.cert, "--tls-key", self.key]

    def credentials(self, **kwargs) -> WorkerCredentials:
        return WorkerCredentials.from_files(self.ca, self.key, self.cert, **kwargs)


class Poller:
    """Polls a connection every 20 ms (a 2 s timeout each) in a thread, counting outcomes."""

    def __init__(self, conn: WorkerConnection, phase: str):
        self.conn, self.phase = conn, phase
        self.ok = 0
        self.failures: list[str] = []  # each failed poll, when it happened and in which phase
        self._start = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            try:
                self.conn.idle(timeout=2.0)
                self.ok += 1
            except libwool.WoolError as e:
                when = time.monotonic() - self._start
                self.failures.append(f"{when:.3f} s into the run ({self.phase}): {e!r}")
            if self._stop.wait(0.02):
                return

    def finish(self) -> tuple[int, list[str]]:
        """Stop polling; the number of successful polls and the failures."""
        self._stop.set()
        self._thread.join(10)
        return self.ok, self.failures


def restart_on_same_address(spawn_worker, conn: WorkerConnection, worker, *args):
    """Stop `worker` over `conn` and start the reference worker again on its address with
    `args` (the files as they are now), so that conn's next call has to dial a new TLS
    connection with its credentials' current material: the worker lets established
    connections carry on, so polls alone cannot tell which material the credentials hold."""
    conn.stop(grace=0.0, timeout=10.0)
    assert worker.wait(10) == 0
    restarted = spawn_worker("--listen", worker.address, *args)
    assert restarted.address == worker.address
    return restarted


def idle_after_restart(conn: WorkerConnection) -> float:
    """Poll until the restarted worker answers, retrying only transient failures that are
    not TLS failures (the previous worker's connection going away) for a few seconds."""
    deadline = time.monotonic() + 5.0
    while True:
        try:
            return conn.idle(timeout=5.0)
        except libwool.HandshakeError:
            raise
        except libwool.TransientRpcError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def test_reloadable_credentials_follow_a_ca_rotation(spawn_worker, certs, next_certs, tmp_path):
    # Given a worker on files with CA1's worker leaf, trusting CA1, and a connection with
    # reloadable credentials on client files with CA1's client leaf, polled every 20 ms;
    # When both sides' files are rotated by renaming, 1.5 s apart: (a) both CA files to
    # CA1+CA2, (b) both leaves to CA2's, (c) both CA files to CA2 alone;
    # Then no poll fails; CA1's material is refused afterwards; and the rotated connection
    # reaches the worker restarted on CA2's files alone, so it really dials with CA2's.
    old, new = certs, next_certs
    worker_side = TlsFiles(tmp_path / "worker", old / "ca.pem", old / "worker.pem",
                            old / "worker.key")
    client_side = TlsFiles(tmp_path / "client", old / "ca.pem", old / "client.pem",
                            old / "client.key")
    worker = spawn_worker(*worker_side.worker_args())
    credentials = client_side.credentials(reloadable=True)
    assert credentials.reloadable
    with WorkerConnection(worker.address, credentials) as conn:
        assert conn.idle(timeout=5.0) >= 0.0
        poller = Poller(conn, "CA1")
        time.sleep(0.5)
        poller.phase = "(a) trusting CA1+CA2"
        worker_side.set_ca(old / "ca.pem", new / "ca.pem")
        client_side.set_ca(old / "ca.pem", new / "ca.pem")
        time.sleep(SETTLE)
        poller.phase = "(b) CA2's leaves"
        worker_side.set_leaf(new / "worker.pem", new / "worker.key")
        client_side.set_leaf(new / "client.pem", new / "client.key")
        time.sleep(SETTLE)
        poller.phase = "(c) trusting CA2 alone"
        worker_side.set_ca(new / "ca.pem")
        client_side.set_ca(new / "ca.pem")
        time.sleep(SETTLE)
        ok, failures = poller.finish()
        assert failures == []
        assert ok >= 50, f"only {ok} polls succeeded"

        # CA1 no longer verifies the worker (fresh credentials from CA1's files, read once).
        with WorkerConnection(worker.address, client_files(old)) as stale:
            with pytest.raises(libwool.HandshakeError):
                stale.idle(timeout=5.0)
        # The worker no longer accepts CA1's client leaf: it refuses it once the client has
        # accepted the worker (a TLS alert): a HandshakeError.
        rejected = WorkerCredentials.from_files(new / "ca.pem", old / "client.key",
                                                old / "client.pem")
        with WorkerConnection(worker.address, rejected) as stale:
            with pytest.raises(libwool.HandshakeError):
                stale.idle(timeout=5.0)

        restart_on_same_address(spawn_worker, conn, worker, *worker_side.worker_args())
        assert idle_after_restart(conn) >= 0.0


def test_reloadable_credentials_keep_their_material_when_a_file_turns_to_garbage(
    mtls_worker, spawn_worker, certs, tmp_path
):
    # Given a connection with reloadable credentials to a mutual-TLS worker; When the client's
    # CA file is overwritten in place with half of itself (a half-written file); Then polls
    # every 20 ms for 1.5 s all succeed, and the connection still reaches the worker
    # restarted on the same address: the refused file left the previous material in use.
    client_side = TlsFiles(tmp_path / "client", certs / "ca.pem", certs / "client.pem",
                            certs / "client.key")
    with WorkerConnection(mtls_worker.address, client_side.credentials(reloadable=True)) as conn:
        assert conn.idle(timeout=5.0) >= 0.0
        poller = Poller(conn, "garbage CA file")
        pem = client_side.ca.read_bytes()
        client_side.ca.write_bytes(pem[: len(pem) // 2])
        time.sleep(SETTLE)
        ok, failures = poller.finish()
        assert failures == []
        assert ok >= 20, f"only {ok} polls succeeded"

        restart_on_same_address(spawn_worker, conn, mtls_worker, *mtls_args(certs))
        assert idle_after_restart(conn) >= 0.0


def test_reloadable_credentials_from_a_missing_file_are_a_value_error_naming_it(tmp_path):
    missing = tmp_path / "missing-ca.pem"
    with pytest.raises(ValueError, match=r"^wool_credentials_from_files_reloadable: ") as caught:
        WorkerCredentials.from_files(missing, mutual=False, reloadable=True)
    assert str(missing) in str(caught.value)


def test_reloadable_credentials_say_so(certs):
    reloadable = WorkerCredentials.from_files(certs / "ca.pem", mutual=False, reloadable=True)
    assert reloadable.reloadable
    assert repr(reloadable) == "<WorkerCredentials one-way TLS, reloadable>"
    fixed = client_files(certs, identity="localhost")
    assert not fixed.reloadable
    assert repr(fixed) == "<WorkerCredentials mutual TLS, identity='localhost'>"
    with pytest.raises(TypeError):
        WorkerCredentials.from_files(certs / "ca.pem", None, None, False, None, True)
