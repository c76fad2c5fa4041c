"""examples/python/poll_then_retire.py, run as a user would."""

from __future__ import annotations

import subprocess
import sys

from conftest import LIBRARY, ROOT

EXAMPLE = ROOT / "examples" / "python" / "poll_then_retire.py"


def test_poll_then_retire_retires_a_worker_once_idle_long_enough(worker):
    # Given an idle reference worker, When the example polls it with a 0.3 s threshold,
    # Then it prints readings, retires the worker, exits 0, and the worker exits 0.
    run = subprocess.run(
        [sys.executable, EXAMPLE, worker.address, "--interval", "0.1", "--threshold", "0.3",
         "--grace", "1", "--libwool", LIBRARY.path],
        capture_output=True, text=True, timeout=30,
    )
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0].startswith("libwool ")
    assert f"{worker.address}: retiring" not in lines  # sanity of the format below
    assert any(": retiring (grace 1 s)" in line for line in lines), lines
    assert lines[-1].startswith(f"{worker.address}: retired in ")
    assert worker.wait(10) == 0


def test_poll_then_retire_reports_a_worker_it_cannot_reach(unused_address):
    # Given nothing listening, Then each round is skipped as transient (not a crash):
    # the example is stopped here by its own subprocess timeout.
    try:
        subprocess.run(
            [sys.executable, EXAMPLE, unused_address, "--interval", "0.1",
             "--libwool", LIBRARY.path],
            capture_output=True, text=True, timeout=1.0,
        )
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
    assert "skipped this round (TransientRpcError: UNAVAILABLE" in out, out
