# Sourced by the ensure-*.sh scripts: where the pinned tools they build live, outside the clone.
# Each tool is keyed by its pinned version (a stamp or marker beside it), so clones of any
# commit share what matches and rebuild what does not; a machine without the folder builds
# everything once, as before. LIBWOOL_TOOLS overrides it (e.g. target/tools for a clone's own).
# Sets TOOLS_DIR.
TOOLS_DIR="${LIBWOOL_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/libwool/tools}"
