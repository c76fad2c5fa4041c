#!/usr/bin/env bash
# Runs the C harness (tests/c/, driven by tests/integration/c_api.rs) under valgrind: every C program the
# tests start runs as
#   valgrind --error-exitcode=97 --leak-check=full --errors-for-leak-kinds=definite ...
# so a definite leak or an invalid read or write fails its test. The only reports let pass are
# ring's AES-GCM false positives (see `suppressions` in tests/integration/c_api.rs). Takes about a minute.
#   scripts/valgrind-c.sh [extra cargo test args, e.g. a test-name filter]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
command -v valgrind >/dev/null || { echo "valgrind-c.sh: valgrind is not installed (apt-get install valgrind)" >&2; exit 1; }
WOOL_VALGRIND=1 exec cargo test -p libwool --test integration -- "${@:-c_api::}"
