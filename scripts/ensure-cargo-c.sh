#!/usr/bin/env bash
# Makes sure cargo-c (cargo cbuild / cinstall) is installed: the pinned 0.10.24, the newest that
# builds with rustc 1.95 (newer releases need a newer rustc). Building it took 18 minutes on 2
# cores, 51 on 2 cores busy with other builds, and needs libssl-dev and pkg-config (installed
# with apt-get when missing and run as root).
set -euo pipefail
CARGO_C_VERSION=0.10.24
if cargo cinstall --version >/dev/null 2>&1; then
    exit 0
fi
if ! pkg-config --exists openssl 2>/dev/null; then
    if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
        echo "ensure-cargo-c: installing libssl-dev and pkg-config" >&2
        apt-get update -qq && apt-get install -y -qq libssl-dev pkg-config >&2
    else
        echo "ensure-cargo-c: cargo-c needs libssl-dev and pkg-config" >&2
        exit 1
    fi
fi
echo "ensure-cargo-c: building cargo-c $CARGO_C_VERSION (once; 18 to 51 minutes on 2 cores)" >&2
cargo install cargo-c --version "=$CARGO_C_VERSION" --locked >&2
