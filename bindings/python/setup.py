"""Build hook of the libwool Python package: bundle libwool's shared library in the wheel.

The package itself is pure Python (ctypes); the only thing built is libwool's C ABI, the
cdylib of the repository's one Rust crate (../../Cargo.toml, feature `capi`), which lands in
the wheel as ``libwool/_libwool.abi3.so`` (``.pyd`` on Windows) and is what ``import libwool``
loads unless LIBWOOL_PATH says otherwise.

Why setuptools-rust (with ``Binding.NoBinding``) rather than maturin:

* The crate stays where it is, at the repository root, with no Python-specific manifest or
  workspace member added: setuptools-rust is pointed at ``../../Cargo.toml`` by an ordinary
  path and just runs ``cargo rustc --lib --crate-type cdylib --features capi`` on it.
  maturin wants to own the crate's packaging (its Cargo.toml/pyproject pairing and
  ``python-source`` layout), and it has no binding kind for a plain C-ABI library loaded with
  ctypes: its ``cffi`` kind generates a cffi module (a runtime dependency on cffi and a second
  binding beside ours), ``pyo3``/``uniffi`` do not apply, ``bin`` ships executables.
* NoBinding copies the cdylib into the package untouched: no generated Python code.
* Build time: both just run cargo. setuptools-rust builds only the cdylib (no rlib or
  staticlib) and, like cargo, puts it in the crate's own target directory (the repository's
  ``target/``, or $CARGO_TARGET_DIR), so a second install, or one after ``cargo build``,
  compiles at most the wool crate itself. ``SETUPTOOLS_RUST_CARGO_PROFILE=dev`` builds an
  unoptimised library quickly (the tests' install does so); the default is ``--release``.

The wheel is tagged ``cp39-abi3``: the library uses no Python API at all, so one wheel fits
every CPython >= 3.9 of that platform.

Only a checkout can build it (the crate lies outside this directory): an sdist of this
directory alone cannot, which is said plainly below rather than failing inside cargo.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from setuptools import setup
from setuptools_rust import Binding, RustExtension

HERE = Path(__file__).resolve().parent
CARGO_TOML = HERE.parents[1] / "Cargo.toml"  # bindings/python -> the repository root

if not CARGO_TOML.is_file():
    sys.exit(
        f"libwool: {CARGO_TOML} not found. This package bundles libwool's C library, built "
        "from the repository's Rust crate: install it from a checkout of the repository "
        "(`pip install bindings/python` at its root; needs Rust and cargo, at the version Cargo.toml's rust-version names)."
    )


def crate_version() -> str:
    """The crate's version (its [package] version), so that the package says the same as
    ``libwool.version()``."""
    package = re.search(r"(?ms)^\[package\]\s*$(.*?)(?=^\[)", CARGO_TOML.read_text("utf-8"))
    version = package and re.search(r'(?m)^version\s*=\s*"([^"]+)"', package.group(1))
    if not version:
        sys.exit(f"libwool: no [package] version found in {CARGO_TOML}")
    return version.group(1)


setup(
    version=crate_version(),
    rust_extensions=[
        RustExtension(
            "libwool._libwool",
            path=str(CARGO_TOML),
            binding=Binding.NoBinding,
            features=["capi"],
        )
    ],
    options={"bdist_wheel": {"py_limited_api": "cp39"}},
    zip_safe=False,  # a shared library must be a real file to be loaded
)
