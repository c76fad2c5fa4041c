"""TLS and mutual TLS against the reference worker, with throwaway certificates (conftest.certs).

The worker's certificate (worker.pem) is for 127.0.0.1, ::1 and localhost, signed by ca.pem;
client.pem is a client certificate signed by ca.pem; rogue-ca.pem and rogue.pem belong to a
CA nobody trusts.
"""

from __future__ import annotations

import pytest

import libwool
from libwool import WorkerConnection, WorkerCredentials


@pytest.fixture
def mtls_worker(spawn_worker, certs):
    """A reference worker requiring client certificates signed by ca.pem."""
    return spawn_worker(
        "--tls-ca", certs / "ca.pem",
        "--tls-cert", certs / "worker.pem",
        "--tls-key", certs / "worker.key",
    )  # fmt: skip


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
    # Given a client certificate from the rogue CA, Then the worker hangs up: under TLS 1.3
    # the client sees a transient failure (a HandshakeError or a plain TransientRpcError).
    with WorkerConnection(mtls_worker.address, client_files(certs, leaf="rogue")) as conn:
        with pytest.raises(libwool.TransientRpcError):
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
    credentials = WorkerCredentials.from_files(certs / "ca.pem", mutual=False)
    with WorkerConnection(mtls_worker.address, credentials) as conn:
        with pytest.raises(libwool.TransientRpcError):
            conn.idle(timeout=5.0)


def test_a_bad_identity_is_a_value_error_with_the_librarys_message(certs):
    with pytest.raises(ValueError, match=r"^wool_credentials_from_files: "):
        WorkerCredentials.from_files(certs / "ca.pem", mutual=False, identity="not a name!")


def test_stop_over_mutual_tls_retires_the_worker(mtls_worker, certs):
    with WorkerConnection(mtls_worker.address, client_files(certs)) as conn:
        conn.stop(grace=0.0, timeout=10.0)
    assert mtls_worker.wait(10) == 0
