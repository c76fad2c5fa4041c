"""`pip install bindings/python` as a stranger would do it: a fresh virtual environment, the
package built from this checkout (setuptools-rust compiles libwool's cdylib and bundles it in
the wheel), then a script run from outside the repository with no LIBWOOL_PATH; the library
bundled must be stripped (no symbol table, no debug sections: setup.py's build_rust).

Marked ``install`` (select with ``-m install``, skip with ``-m 'not install'``). Needs cargo
and PyPI (the build backend, pinned in pyproject.toml, comes from there).

The build reuses the repository's target directory (or $CARGO_TARGET_DIR when set) and, unless
$SETUPTOOLS_RUST_CARGO_PROFILE says otherwise, the ``dev`` profile: after
``cargo build -p libwool-capi`` (scripts/python-test.sh) only the wool crate itself is
compiled. A user's plain ``pip install bindings/python`` builds ``--release``.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import ROOT

pytestmark = pytest.mark.install

PACKAGE = ROOT / "bindings" / "python"

# Run by the fresh venv's Python, from a directory outside the repository.
SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    import libwool

    library = libwool.load()  # the default search: no path, no LIBWOOL_PATH
    with libwool.WorkerConnection(sys.argv[1]) as worker:
        idle = worker.idle(timeout=10.0)
    print(f"idle {idle:.3f} s", flush=True)
    print(json.dumps({
        "library": library.path,
        "version": libwool.version(),
        "package": os.path.dirname(libwool.__file__),
        "sys.path": sys.path,
        "LIBWOOL_PATH": os.environ.get("LIBWOOL_PATH"),
    }))
    """
)


def clean_environment() -> dict[str, str]:
    """This process's environment without what would point the venv elsewhere: no
    LIBWOOL_PATH, no PYTHONPATH/PYTHONHOME, no active virtual environment."""
    env = {
        k: v for k, v in os.environ.items()
        if k not in ("LIBWOOL_PATH", "PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "__PYVENV_LAUNCHER__")
    }
    env.setdefault("SETUPTOOLS_RUST_CARGO_PROFILE", "dev")  # tests: a quick unoptimised build
    return env


def elf_section_names(path: Path) -> list[str] | None:
    """The section names of the ELF file at `path` (None when it is not ELF), read from its
    section headers and their string table."""
    data = path.read_bytes()
    if data[:4] != b"\x7fELF":
        return None
    wide, order = data[4] == 2, "<" if data[5] == 1 else ">"
    if wide:  # ELF64: e_shoff at 0x28; e_shentsize, e_shnum, e_shstrndx at 0x3A
        (shoff,) = struct.unpack_from(order + "Q", data, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from(order + "HHH", data, 0x3A)
        fields = order + "IIQQQQ"
    else:  # ELF32: e_shoff at 0x20; the three at 0x2E
        (shoff,) = struct.unpack_from(order + "I", data, 0x20)
        shentsize, shnum, shstrndx = struct.unpack_from(order + "HHH", data, 0x2E)
        fields = order + "IIIIII"
    # (sh_name, sh_type, sh_flags, sh_addr, sh_offset, sh_size) of each section
    headers = [struct.unpack_from(fields, data, shoff + i * shentsize) for i in range(shnum)]
    strtab = data[headers[shstrndx][4]:headers[shstrndx][4] + headers[shstrndx][5]]
    return [strtab[h[0]:strtab.index(b"\0", h[0])].decode() for h in headers]


def run(argv, *, timeout: float, **kwargs) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([str(a) for a in argv], capture_output=True, text=True,
                          timeout=timeout, **kwargs)
    assert done.returncode == 0, (
        f"{' '.join(map(str, argv))} exited {done.returncode}\n"
        f"--- stdout (end)\n{done.stdout[-6000:]}\n--- stderr (end)\n{done.stderr[-6000:]}"
    )
    return done


def test_pip_install_bundles_libwool_and_polls_a_worker_from_outside_the_repository(
    tmp_path, spawn_worker
):
    # Given a fresh virtual environment and a working directory outside the repository,
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    assert not outside.resolve().is_relative_to(ROOT), f"{outside} is inside {ROOT}"
    env = clean_environment()
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", venv], timeout=120, env=env)
    python = venv / "bin" / "python"

    # When the package is pip-installed from the checkout (building the wheel),
    started = time.monotonic()
    install = run(
        [python, "-m", "pip", "install", "--disable-pip-version-check", "--verbose", PACKAGE],
        timeout=3600, env=env, cwd=outside,
    )
    took = time.monotonic() - started
    print(f"pip install {PACKAGE} (cargo profile {env['SETUPTOOLS_RUST_CARGO_PROFILE']}): "
          f"{took:.1f} s")
    assert "cargo rustc" in install.stdout + install.stderr, "the wheel was not built here"

    # And a script imports libwool and polls a reference worker, with no LIBWOOL_PATH,
    worker = spawn_worker()
    (outside / "poll.py").write_text(SCRIPT)
    polled = run([python, "poll.py", worker.address], timeout=60, env=env, cwd=outside)

    # Then it prints the idle reading,
    lines = polled.stdout.splitlines()
    print(lines[0])
    assert lines[0].startswith("idle ") and lines[0].endswith(" s"), lines
    assert float(lines[0].split()[1]) >= 0.0
    # and the library it loaded is the one bundled inside the venv's site-packages, not the
    # repository's build or anything LIBWOOL_PATH could name.
    seen = json.loads(lines[1])
    assert seen["LIBWOOL_PATH"] is None
    site_packages = json.loads(run(
        [python, "-c", "import json, sysconfig; "
         "print(json.dumps([sysconfig.get_path('purelib'), sysconfig.get_path('platlib')]))"],
        timeout=60, env=env, cwd=outside,
    ).stdout)
    package = Path(seen["package"]).resolve()
    library = Path(seen["library"]).resolve()
    assert any(package == Path(p).resolve() / "libwool" for p in site_packages), (
        package, site_packages)
    assert library.parent == package, library
    assert library.name.startswith("_libwool."), library
    assert not library.is_relative_to(ROOT), library
    # The bundled library is stripped (setup.py's build_rust, whatever the cargo profile): no
    # symbol table, no debug info; its dynamic symbols (the exported wool_* ones) stay.
    sections = elf_section_names(library)
    if sections is not None:
        print(f"bundled {library.name}: {library.stat().st_size:,} bytes")
        unstripped = [s for s in sections if s == ".symtab" or s.startswith((".debug", ".zdebug"))]
        assert not unstripped, f"{library} ({library.stat().st_size:,} bytes) is not stripped: " \
            f"it has {', '.join(unstripped)}"
        assert ".dynsym" in sections, sections
    assert not any(Path(p).resolve().is_relative_to(ROOT) for p in seen["sys.path"] if p), (
        "the repository is on the venv's sys.path", seen["sys.path"])
    # The bundled library is the crate's, at the crate's version.
    cargo_version = next(
        line.split('"')[1] for line in (ROOT / "capi" / "Cargo.toml").read_text().splitlines()
        if line.startswith("version = ")
    )
    assert seen["version"] == cargo_version
    shown = run([python, "-m", "pip", "show", "libwool"], timeout=60, env=env, cwd=outside)
    assert f"Version: {cargo_version}" in shown.stdout.splitlines()
