# Sourced by the ensure-*.sh scripts: where the pinned tools they build live, outside the clone.
# Each tool is keyed by its pinned version (a stamp or marker beside it), so clones of any
# commit share what matches and rebuild what does not; a machine without the folder builds
# everything once, as before. LIBWOOL_TOOLS overrides it (e.g. target/tools for a clone's own).
# Sets TOOLS_DIR.
TOOLS_DIR="${LIBWOOL_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/libwool/tools}"

# The instrumented and nightly builds of the fuzz and sanitizer suites, kept between runs in the
# same way (LIBWOOL_BUILDS overrides it): std built with a sanitizer and every dependency are
# reused, only this workspace's own crates are built again. Past LIBWOOL_BUILDS_MAX_GB (24 by
# default) the folder is emptied first, since each clone's own crates add to it.
# Sets BUILDS_DIR; call `trim_builds` before using it.
BUILDS_DIR="${LIBWOOL_BUILDS:-${XDG_CACHE_HOME:-$HOME/.cache}/libwool/builds}"
trim_builds() {
    local max_kib=$((${LIBWOOL_BUILDS_MAX_GB:-24} * 1024 * 1024)) used
    mkdir -p "$BUILDS_DIR"
    used="$(du -sk "$BUILDS_DIR" 2>/dev/null | cut -f1)"
    if ((${used:-0} > max_kib)); then
        echo "builds cache $BUILDS_DIR holds ${used} KiB, over the limit: emptied" >&2
        rm -rf "${BUILDS_DIR:?}"/*
    fi
}

# A virtual environment at DIR holding the pinned PyPI packages PINS (made once; `.installed`
# marks it complete, so a second call only checks the mark). LABEL names the caller in its log.
# Usage: pip_venv LABEL DIR PIN...
pip_venv() {
    local label="$1" dir="$2"
    shift 2
    [[ -f "$dir/.installed" ]] && return 0
    echo "$label: installing $* into $dir" >&2
    rm -rf "$dir"
    python3 -m venv "$dir" >&2 &&
        "$dir/bin/python" -m pip install -q --disable-pip-version-check "$@" >&2 &&
        touch "$dir/.installed"
}
