"""The entrypoint serving TLS from files, to a real Wool client with mutual TLS."""

from __future__ import annotations

import asyncio
import dataclasses
import shutil
import signal
import subprocess

import pytest
import sleepy_app
import wool
from conftest import PACKAGE_DIR, worker_metadata
from wool.runtime.worker.proxy import WorkerProxy

pytestmark = pytest.mark.usefixtures("installed_package")

MAKE_CERTS = PACKAGE_DIR.parent.parent / "tests" / "interop" / "make-test-certs.sh"


@pytest.fixture
def certs(tmp_path):
    """Throwaway TLS material (the repository's test CA script): ca, worker (SANs 127.0.0.1)."""
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is needed for the test certificates")
    out = tmp_path / "certs"
    subprocess.run(["bash", str(MAKE_CERTS), str(out)], check=True, capture_output=True, timeout=120)
    return out


def test_entrypoint_serves_mutual_tls_from_files(entrypoint, certs):
    """Given the entrypoint started with --tls-ca/--tls-cert/--tls-key, a Wool client holding
    the CA and a certificate it signed gets its routine's result, and the worker's own
    metadata says secure; then SIGTERM stops it with status 0."""
    worker = entrypoint("--tls-ca", str(certs / "ca.pem"), "--tls-cert", str(certs / "worker.pem"),
                        "--tls-key", str(certs / "worker.key"))
    credentials = wool.WorkerCredentials.from_files(certs / "ca.pem", certs / "worker.key", certs / "worker.pem")
    metadata = dataclasses.replace(worker_metadata(worker.address, worker.process.pid), secure=True)

    async def scenario():
        async with WorkerProxy(workers=[metadata], credentials=credentials):
            return await sleepy_app.nap(0.1)

    assert asyncio.run(scenario()) == 0.1
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0, worker.log()


def test_tls_files_must_come_together(entrypoint, certs):
    """Given --tls-cert without the CA and key, the worker refuses with usage status 2."""
    worker = entrypoint("--tls-cert", str(certs / "worker.pem"), wait=False)
    assert worker.wait() == 2
    assert "go together" in worker.log()
