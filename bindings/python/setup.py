"""Build hook of the libwool Python package: bundle libwool's shared library in the wheel.

The package itself is pure Python (ctypes); the only thing built is libwool's C ABI, the
cdylib of the repository's C ABI package (../../capi/Cargo.toml, `libwool-capi`), which lands in
the wheel as ``libwool/_libwool.abi3.so`` (``.pyd`` on Windows) and is what ``import libwool``
loads unless LIBWOOL_PATH says otherwise.

Why setuptools-rust (with ``Binding.NoBinding``) rather than maturin:

* maturin has no way to ship a plain C-ABI library for ctypes: its binding kinds are pyo3
  (a Python extension module, which this crate is not), cffi (it runs cbindgen and generates
  a cffi module: a runtime dependency on cffi and a second binding beside this one), uniffi,
  and bin (executables). There is no ``cdylib`` kind. setuptools-rust's ``NoBinding`` is
  exactly "build the cdylib, copy it into the package".
* The package stays where it is, the workspace's C ABI package, with no Python manifest,
  workspace member or build script added to it: setuptools-rust is given
  ``../../capi/Cargo.toml`` as a path and runs ``cargo rustc --lib --crate-type cdylib``
  on it, in the workspace's target directory.
* The bundled library is stripped of its symbol table and debug info (``strip --strip-all``
  on the copy in the package, by ``build_rust`` below, for every build): what hosts load
  needs only the exported ``wool_*`` symbols, which are dynamic ones and stay. The unstripped
  library, debug info included, stays in ``target/`` (the release profile keeps line tables:
  ``debug = 1``). setuptools-rust's own ``Strip.All`` is not enough: it runs ``strip -x``,
  which keeps the symbol table's global symbols; it is skipped for a debug build
  (``build_ext --debug`` or ``--inplace``); and a ``strip`` that fails (the host's ``strip``
  on a cross-compiled library) is ignored: the library then ships with all its symbols and
  debug info (tens of MB).
* Build time: both just run cargo. setuptools-rust builds only the cdylib (no rlib or
  staticlib) and, like cargo, puts it in the crate's own target directory (the repository's
  ``target/``, or $CARGO_TARGET_DIR), so a second install, or one after a cargo build of
  the same profile, compiles at most the wool crate itself (seconds), not its dependencies. ``SETUPTOOLS_RUST_CARGO_PROFILE=dev`` builds an
  unoptimised library quickly (the tests' install does so); the default is ``--release``.

The wheel is tagged ``cp39-abi3``: the library uses no Python API at all, so one wheel fits
every CPython >= 3.9 of that platform.

Where the Rust sources come from, first match:

* a checkout: ``../../capi/Cargo.toml`` (the workspace's C ABI package, its Cargo.lock);
* the sdist (``libwool-<version>.tar.gz``, made by ``scripts/release.sh``): ``rust/capi``
  and ``rust/libwool``, the two crates as ``cargo package`` packs them, in a workspace of
  their own (``rust/Cargo.toml``, whose ``[patch.crates-io]`` points ``libwool`` at
  ``rust/libwool``) with its ``Cargo.lock``, built ``--locked``; cargo fetches the other
  crates from crates.io at build time (none are vendored).

``LIBWOOL_PREBUILT_LIBRARY=/path/to/libwool.so`` skips cargo altogether: that file, already
built and stripped (``scripts/release.sh`` cross-builds it for glibc 2.17 with
cargo-zigbuild), is put in the wheel as ``libwool/_libwool.abi3.so``; ``LIBWOOL_PLAT_NAME``
then gives the wheel's platform tag (e.g. ``manylinux2014_aarch64``). This is how the
released wheels are made, so the library in them is the same file as in the C archives.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py as _build_py
from setuptools_rust import Binding, RustExtension, Strip
from setuptools_rust import build_rust as _build_rust

HERE = Path(__file__).resolve().parent
CHECKOUT_CARGO_TOML = HERE.parents[1] / "capi" / "Cargo.toml"  # bindings/python -> capi/
SDIST_CARGO_TOML = HERE / "rust" / "capi" / "Cargo.toml"  # the sdist's copy (release.sh)
IN_SDIST = not CHECKOUT_CARGO_TOML.is_file() and SDIST_CARGO_TOML.is_file()
CARGO_TOML = SDIST_CARGO_TOML if IN_SDIST else CHECKOUT_CARGO_TOML
PREBUILT = os.environ.get("LIBWOOL_PREBUILT_LIBRARY")
BUNDLED_NAME = "_libwool.abi3.so"  # what libwool._ffi.bundled_candidates() finds

if not CARGO_TOML.is_file():
    sys.exit(
        f"libwool: neither {CHECKOUT_CARGO_TOML} (a checkout) nor {SDIST_CARGO_TOML} (the "
        "sdist) found. This package bundles libwool's C library, built from the Rust crates: "
        "install the released wheel, the sdist (`pip install libwool-<version>.tar.gz`, needs "
        "cargo) or from a checkout (`pip install bindings/python` at its root; needs cargo at "
        "least at the rust-version of Cargo.toml)."
    )
if PREBUILT and not Path(PREBUILT).is_file():
    sys.exit(f"libwool: LIBWOOL_PREBUILT_LIBRARY={PREBUILT!r}: no such file")


def crate_version() -> str:
    """The crate's version (its [package] version), so that the package says the same as
    ``libwool.version()``."""
    package = re.search(r"(?ms)^\[package\]\s*$(.*?)(?=^\[)", CARGO_TOML.read_text("utf-8"))
    version = package and re.search(r'(?m)^version\s*=\s*"([^"]+)"', package.group(1))
    if not version:
        sys.exit(f"libwool: no [package] version found in {CARGO_TOML}")
    return version.group(1)


class build_rust(_build_rust):
    """setuptools-rust's build_rust, then the library copied into the package stripped of its
    symbol table and debug info, on ELF platforms: ``--strip-all`` by the first of $STRIP (a
    cross toolchain's), ``strip`` and ``llvm-strip`` that succeeds; the dynamic symbols (the
    exported ``wool_*`` ones) stay. None found: a warning, the library bundled as built; all
    failing: an error. macOS keeps setuptools-rust's ``strip -x`` (``Strip.All``: a dylib's
    debug info is not in it), Windows its separate .pdb."""

    def install_extension(self, ext, dylib_paths, build_artifact_dir) -> None:
        super().install_extension(ext, dylib_paths, build_artifact_dir)
        if sys.platform in ("win32", "darwin"):
            return
        names = [os.environ.get("STRIP", ""), "strip", "llvm-strip"]
        tools = list(dict.fromkeys(t for t in map(shutil.which, filter(None, names)) if t))
        for module_name, _ in dylib_paths:
            path = Path(self.get_dylib_ext_path(ext, module_name or ext.name))
            if not tools:
                print(f"libwool: warning: no strip found (binutils, llvm-strip, $STRIP): {path} "
                      "is bundled unstripped, with its symbol table and debug info",
                      file=sys.stderr)
                continue
            before, failures = path.stat().st_size, []
            for tool in tools:
                done = subprocess.run([tool, "--strip-all", str(path)], capture_output=True,
                                      text=True)
                if done.returncode == 0:
                    print(f"libwool: stripped {path} ({tool}): {before:,} -> "
                          f"{path.stat().st_size:,} bytes", file=sys.stderr)
                    break
                failures.append(f"{tool}: {done.stderr.strip() or done.returncode}")
            else:
                sys.exit(f"libwool: could not strip {path}: " + "; ".join(failures)
                         + " (set STRIP to a strip for the library's target)")


class build_py_prebuilt(_build_py):
    """build_py, then $LIBWOOL_PREBUILT_LIBRARY copied in as ``libwool/_libwool.abi3.so``
    (mode 0755), as built: release.sh has stripped it already."""

    def run(self) -> None:
        super().run()
        target = Path(self.build_lib) / "libwool" / BUNDLED_NAME
        shutil.copyfile(PREBUILT, target)
        target.chmod(0o755)

    def get_outputs(self, include_bytecode=True):
        return super().get_outputs(include_bytecode) + [
            str(Path(self.build_lib) / "libwool" / BUNDLED_NAME)
        ]


class BinaryDistribution(Distribution):
    """A platform wheel (``cp39-abi3-<platform>``) though setuptools builds no extension:
    the bundled library is native code."""

    def has_ext_modules(self) -> bool:
        return True


if PREBUILT:
    build = {
        "cmdclass": {"build_py": build_py_prebuilt},
        "distclass": BinaryDistribution,
    }
    wheel_options = {"py_limited_api": "cp39"}
    if os.environ.get("LIBWOOL_PLAT_NAME"):
        wheel_options["plat_name"] = os.environ["LIBWOOL_PLAT_NAME"]
else:
    build = {
        "cmdclass": {"build_rust": build_rust},
        "rust_extensions": [
            RustExtension(
                "libwool._libwool",
                path=str(CARGO_TOML),
                binding=Binding.NoBinding,
                strip=Strip.All,
                # The sdist's Cargo.lock is the one its crates were released with.
                cargo_manifest_args=["--locked"] if IN_SDIST else [],
            )
        ],
    }
    wheel_options = {"py_limited_api": "cp39"}

setup(
    version=crate_version(),
    options={"bdist_wheel": wheel_options},
    zip_safe=False,  # a shared library must be a real file to be loaded
    **build,
)
