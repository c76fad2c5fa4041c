# Sourced by the release tests (release-test.sh, release-test-go.sh, release-test-dlopen.sh):
# what each needs alike. The caller defines `log` and `fail` and sets `work` (its temporary
# directory) and `WORKER` (the wool-worker binary) before calling these.

# PATH without Rust: every entry holding cargo or rustc goes, ~/.cargo/bin first of all; the
# directories given come first. Exports PATH and fails if cargo or rustc is still found.
path_without_rust() { # [dir ...]
    local entries d kept=("$@")
    IFS=: read -r -a entries <<<"$PATH"
    for d in "${entries[@]}"; do
        [[ -z "$d" || "$d" == "$HOME/.cargo/bin" || -e "$d/cargo" || -e "$d/rustc" ]] && continue
        kept+=("$d")
    done
    PATH="$(IFS=:; echo "${kept[*]}")"
    export PATH
    for d in cargo rustc; do
        if command -v "$d" >/dev/null; then fail "$d is still on PATH ($(command -v "$d"))"; fi
    done
}

# Starts a worker on loopback (its output in $work/worker-N.{out,err}); sets worker_pid, and
# address to the first line it prints. The caller's EXIT trap kills $worker_pid if still set.
workers=0
worker_pid=""
start_worker() {
    workers=$((workers + 1))
    local out="$work/worker-$workers.out" err="$work/worker-$workers.err"
    "$WORKER" >"$out" 2>"$err" &
    worker_pid=$!
    address=""
    for _ in $(seq 300); do
        address="$(head -1 "$out" 2>/dev/null || true)"
        [[ -n "$address" ]] && return 0
        kill -0 "$worker_pid" 2>/dev/null || fail "wool-worker exited: $(cat "$err")"
        sleep 0.1
    done
    fail "wool-worker printed no address"
}

# The worker must have been stopped over the wire (it exits 0) within 60 s.
expect_stopped() { # what
    for _ in $(seq 600); do
        if ! kill -0 "$worker_pid" 2>/dev/null; then
            local rc=0
            wait "$worker_pid" || rc=$?
            worker_pid=""
            ((rc == 0)) || fail "$1: wool-worker exited $rc ($(tail -3 "$work/worker-$workers.err"))"
            log "ok: $1 (the worker was stopped)"
            return 0
        fi
        sleep 0.1
    done
    fail "$1: the worker was not stopped ($(tail -3 "$work/worker-$workers.err"))"
}

# The README's example for a language (c | go | python): the fenced block after the line that
# introduces it. The caller sets ROOT (the checkout) and checks what it expects of the block.
snippet() { # language
    local intro
    case "$1" in
        c) intro='C (`include/wool.h`), a whole program' ;;
        go) intro='Go (`bindings/go`, package `wool`), a whole program' ;;
        python) intro='Python (`bindings/python`' ;;
        *) fail "snippet: no README example for $1" ;;
    esac
    awk -v intro="$intro" -v lang="$1" '
        index($0, intro) == 1 { found = 1; next }
        found && !inblock && $0 == "```" lang { inblock = 1; next }
        inblock && $0 == "```" { exit }
        inblock { print }' "$ROOT/README.md"
}
