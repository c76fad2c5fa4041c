"""Loading libwool and the binding's fidelity to include/wool.h (no worker needed)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import libwool
from libwool import _ffi

from conftest import LIBRARY, ROOT


def test_load_with_a_missing_path_names_it_and_does_not_fall_back(tmp_path):
    # Given a path where no library is, When load is given it,
    # Then LibraryNotFound (an OSError) names the path, and nothing else is tried.
    missing = tmp_path / "nowhere" / "libwool.so"
    with pytest.raises(libwool.LibraryNotFound) as caught:
        libwool.load(missing)
    assert isinstance(caught.value, OSError)
    assert f"argument path={str(missing)!r}" in str(caught.value)
    assert "target/debug" not in str(caught.value)


def test_load_follows_the_environment_variable_and_names_it(tmp_path, monkeypatch):
    missing = tmp_path / "libwool.so"
    monkeypatch.setenv("LIBWOOL_PATH", str(missing))
    with pytest.raises(libwool.LibraryNotFound, match=r"\$LIBWOOL_PATH=") as caught:
        libwool.load()
    assert str(missing) in str(caught.value)


def test_importing_with_the_environment_variable_naming_no_file_is_an_import_error(tmp_path):
    # Given LIBWOOL_PATH naming a file that does not exist, When a fresh process imports
    # libwool, Then the import fails with ImportError naming the path (not later, on first use).
    missing = tmp_path / "no-such-dir" / "libwool.so"
    package_root = Path(libwool.__file__).resolve().parents[1]
    done = subprocess.run(
        [sys.executable, "-c", "import libwool"],
        env={**os.environ, "LIBWOOL_PATH": str(missing), "PYTHONPATH": str(package_root)},
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 1, done
    assert "ImportError" in done.stderr, done.stderr
    assert f"LIBWOOL_PATH={str(missing)!r}: no such file" in done.stderr, done.stderr


def test_load_searches_bundled_then_release_then_debug_and_lists_them(tmp_path, monkeypatch):
    # Given no argument, no LIBWOOL_PATH, no bundled library and no repository build,
    # Then the error lists the bundled place, then target/release before target/debug, and
    # how to fix it.
    monkeypatch.delenv("LIBWOOL_PATH", raising=False)
    bundled = tmp_path / "pkg" / "_libwool.abi3.so"
    release, debug = tmp_path / "release" / "libwool.so", tmp_path / "debug" / "libwool.so"
    monkeypatch.setattr(_ffi, "bundled_candidates", lambda: [bundled])
    monkeypatch.setattr(_ffi, "repo_candidates", lambda: [release, debug])
    with pytest.raises(libwool.LibraryNotFound) as caught:
        libwool.load()
    message = str(caught.value)
    assert "bundled" in message
    assert message.index("bundled") < message.index(str(release)) < message.index(str(debug))
    assert "pip install bindings/python" in message
    assert "cargo build -p libwool-capi" in message


def test_load_prefers_the_bundled_library_to_the_repository_build(tmp_path, monkeypatch):
    # Given a library bundled in the package (here: a link to the one under test, so that
    # no second copy is loaded into this process) and no LIBWOOL_PATH,
    # When load searches, Then it takes the bundled one, never reaching the repository's.
    monkeypatch.delenv("LIBWOOL_PATH", raising=False)
    monkeypatch.setattr(_ffi, "_default", LIBRARY)  # restored afterwards
    bundled = tmp_path / "_libwool.abi3.so"
    bundled.symlink_to(LIBRARY.path)
    unreachable = tmp_path / "repository" / "libwool.so"
    monkeypatch.setattr(_ffi, "bundled_candidates", lambda: [tmp_path / "_libwool.so", bundled])
    monkeypatch.setattr(_ffi, "repo_candidates", lambda: [unreachable])
    assert libwool.load() is LIBRARY


def test_the_environment_variable_overrides_the_bundled_library(tmp_path, monkeypatch):
    # Given a bundled library and LIBWOOL_PATH naming a missing file,
    # Then load fails on LIBWOOL_PATH: it never falls back to the bundled one.
    bundled = tmp_path / "_libwool.abi3.so"
    bundled.symlink_to(LIBRARY.path)
    monkeypatch.setattr(_ffi, "bundled_candidates", lambda: [bundled])
    monkeypatch.setenv("LIBWOOL_PATH", str(tmp_path / "elsewhere.so"))
    with pytest.raises(libwool.LibraryNotFound, match=r"\$LIBWOOL_PATH=") as caught:
        libwool.load()
    assert str(bundled) not in str(caught.value)


def test_an_installed_copy_has_no_repository_fallback(tmp_path, monkeypatch):
    # Given the package copied out of the checkout (as into site-packages),
    # Then it looks for no repository build, only for its bundled library.
    shutil.copytree(Path(_ffi.__file__).parent, tmp_path / "libwool")
    run = subprocess.run(
        [sys.executable, "-c",
         "from libwool import _ffi; print(_ffi.repo_candidates()); "
         "print(_ffi.bundled_candidates()[0].parent)"],
        cwd=tmp_path, capture_output=True, text=True, timeout=30,
        env={k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "LIBWOOL_PATH")},
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == ["[]", str((tmp_path / "libwool").resolve())]


def test_load_refuses_a_file_that_is_not_a_library(tmp_path):
    bogus = tmp_path / "libwool.so"
    bogus.write_text("not an ELF file")
    with pytest.raises(libwool.LibraryNotFound, match=re.escape(str(bogus))):
        libwool.load(bogus)


def test_a_failed_load_keeps_the_previous_default(tmp_path):
    with pytest.raises(OSError):
        libwool.load(tmp_path / "missing.so")
    assert _ffi.default() is LIBRARY


def test_loading_the_same_file_twice_gives_the_same_library():
    assert libwool.load(LIBRARY.path) is LIBRARY


def test_version_is_the_crate_version():
    cargo = (ROOT / "capi" / "Cargo.toml").read_text()
    crate_version = re.search(r'^version\s*=\s*"([^"]+)"', cargo, re.M).group(1)
    assert libwool.version() == crate_version


def _header_prototypes() -> dict[str, int]:
    """Function name -> parameter count, from include/wool.h."""
    header = (ROOT / "include" / "wool.h").read_text()
    header = re.sub(r"/\*.*?\*/", "", header, flags=re.S)  # drop comments
    prototypes = {}
    for name, params in re.findall(r"\b(wool_\w+)\s*\(([^)]*)\)\s*;", header):
        params = params.strip()
        prototypes[name] = 0 if params in ("", "void") else params.count(",") + 1
    return prototypes


def test_every_header_function_is_declared_with_its_arity():
    # The binding declares argtypes/restype for exactly the header's functions; a function
    # added to the C API without a binding (or removed from it) fails here.
    header = _header_prototypes()
    assert header, "no prototypes parsed from include/wool.h"
    declared = {name: len(argtypes) for name, (_, argtypes) in _ffi.PROTOTYPES.items()}
    assert declared == header


def test_status_values_match_the_library_names():
    # The binding's status numbers and exception classes agree with wool_status_name.
    expected = {
        _ffi.OK: "WOOL_STATUS_OK",
        _ffi.INVALID_ARGUMENT: "WOOL_STATUS_INVALID_ARGUMENT",
        _ffi.IDLE_UNAVAILABLE: libwool.IdleUnavailable.status,
        _ffi.TRANSIENT: libwool.TransientRpcError.status,
        _ffi.HANDSHAKE: libwool.HandshakeError.status,
        _ffi.RPC_ERROR: libwool.RpcError.status,
        _ffi.PANIC: libwool.LibraryPanic.status,
        _ffi.CANCELLED: libwool.Cancelled.status,
    }
    for value, name in expected.items():
        assert LIBRARY.status_name(value) == name
    assert LIBRARY.status_name(99) == "WOOL_STATUS_UNKNOWN"
    assert LIBRARY.status_name(-1) == "WOOL_STATUS_UNKNOWN"


def test_exception_hierarchy_is_wools():
    assert issubclass(libwool.HandshakeError, libwool.TransientRpcError)
    assert issubclass(libwool.TransientRpcError, libwool.RpcError)
    assert issubclass(libwool.IdleUnavailable, libwool.WoolError)
    assert not issubclass(libwool.IdleUnavailable, libwool.RpcError)
    assert issubclass(libwool.LibraryPanic, RuntimeError)
    assert issubclass(libwool.Cancelled, libwool.WoolError)
    assert not issubclass(libwool.Cancelled, libwool.RpcError)


def test_each_thread_reads_its_own_last_error():
    # Given many threads failing at once with different targets, Then each ValueError
    # carries the message of its own thread's failure (the last error is thread-local).
    targets = [f"host-{i}:99999" for i in range(32)]
    messages: dict[str, str] = {}
    mixed_up: list[tuple[str, str]] = []
    barrier = threading.Barrier(len(targets))

    def fail(target: str) -> None:
        barrier.wait()
        for _ in range(50):
            try:
                libwool.WorkerConnection(target)
            except ValueError as e:
                messages[target] = str(e)
                if target not in str(e):
                    mixed_up.append((target, str(e)))

    threads = [threading.Thread(target=fail, args=(t,)) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(messages) == sorted(targets)
    assert mixed_up == []


@pytest.mark.parametrize(
    "status, exception",
    [
        (_ffi.INVALID_ARGUMENT, ValueError),
        (_ffi.IDLE_UNAVAILABLE, libwool.IdleUnavailable),
        (_ffi.TRANSIENT, libwool.TransientRpcError),
        (_ffi.HANDSHAKE, libwool.HandshakeError),
        (_ffi.RPC_ERROR, libwool.RpcError),
        (_ffi.PANIC, libwool.LibraryPanic),
        (_ffi.CANCELLED, libwool.Cancelled),
        (42, RuntimeError),
    ],
)
def test_each_status_raises_its_exception_with_the_last_error(status, exception):
    # Given a real failure recorded as this thread's last error, When a status is checked,
    # Then the mapped exception carries that message (PANIC cannot be provoked from outside,
    # so the mapping is checked directly).
    with pytest.raises(ValueError):
        libwool.WorkerConnection("")
    with pytest.raises(exception) as caught:
        libwool._errors._check(LIBRARY, status)
    assert type(caught.value) is exception
    assert 'wool_connect: invalid target ""' in str(caught.value)
    if status == 42:
        assert "WOOL_STATUS_UNKNOWN" in str(caught.value)


def test_ok_raises_nothing():
    assert libwool._errors._check(LIBRARY, _ffi.OK) is None
