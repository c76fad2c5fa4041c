"""The entrypoint as installed: its console script, how it refuses to start."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import libwool_kubernetes
from conftest import PACKAGE_DIR, app_environment

pytestmark = pytest.mark.usefixtures("installed_package")


def test_the_package_is_the_installed_copy():
    """Given the test run, the package under test is the one pip installed, not the checkout's."""
    installed = Path(libwool_kubernetes.__file__).resolve()
    assert not installed.is_relative_to(PACKAGE_DIR)
    assert "site-packages" in installed.parts
    assert libwool_kubernetes.__version__ == "0.5.0"


def test_console_script_is_installed(tmp_path):
    """Given the installed package, `wool-pod-worker --help` runs and names its flags."""
    script = Path(sys.executable).parent / "wool-pod-worker"
    done = subprocess.run([script, "--help"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    for flag in ("--import", "--port", "--health-port", "--grace", "--tls-cert"):
        assert flag in done.stdout


def test_module_that_does_not_import_fails_the_start(entrypoint):
    """Given `--import` of a missing module, the worker exits 1 before serving, saying why."""
    worker = entrypoint("--import", "no_such_app_module", wait=False)
    assert worker.wait() == 1
    assert "cannot start: ModuleNotFoundError" in worker.log()


def test_a_taken_probe_port_fails_the_start(entrypoint, tmp_path):
    """Given a probe port already taken, the worker exits 1 before serving."""
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        worker = entrypoint("--health-port", str(taken.getsockname()[1]), wait=False)
        assert worker.wait() == 1
    assert "cannot start: OSError" in worker.log()


def test_grace_from_environment_is_checked(tmp_path):
    """Given WOOL_GRACE_SECONDS that is no number, the worker refuses with usage status 2."""
    env = app_environment() | {"WOOL_GRACE_SECONDS": "soon"}
    done = subprocess.run([sys.executable, "-m", "libwool_kubernetes.worker"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "WOOL_GRACE_SECONDS" in done.stderr


def test_grace_from_environment_is_the_default(entrypoint):
    """Given WOOL_GRACE_SECONDS=7, the started worker's grace is 7 s."""
    worker = entrypoint(env=app_environment() | {"WOOL_GRACE_SECONDS": "7"})
    assert "grace 7 s" in worker.log()
