"""WorkerConnection's channel options (keyword arguments, libwool's wool_channel_options):
accepted and refused values, and keepalive against a frozen reference worker (SIGSTOP)."""

from __future__ import annotations

import math
import os
import signal
import threading
import time

import pytest

import libwool
from libwool import WorkerConnection

from conftest import LIBRARY

# A value for every option, none of them the default.
EVERY_OPTION = {
    "max_receive_message_bytes": 4 * 1024 * 1024,
    "max_send_message_bytes": 1024 * 1024,
    "keepalive_interval": 10.0,
    "keepalive_timeout": 5.0,
    "keepalive_without_calls": False,
    "max_pings_without_data": 0,
    "max_concurrent_streams": 8,
    "connect_timeout": 3.0,
}
SECONDS_OPTIONS = ["keepalive_interval", "keepalive_timeout", "connect_timeout"]
SIZE_OPTIONS = ["max_receive_message_bytes", "max_send_message_bytes", "max_concurrent_streams"]
NOWHERE = "127.0.0.1:1"  # connecting is lazy: option checks need no worker


# ---------------------------------------------------------------- accepted


def test_every_option_is_accepted_and_the_connection_polls(worker):
    with WorkerConnection(worker.address, **EVERY_OPTION) as conn:
        assert conn.idle(timeout=5.0) >= 0.0
        conn.stop(grace=0.0, timeout=10.0)
    assert dict(conn.channel_options) == EVERY_OPTION
    assert worker.wait(10) == 0


@pytest.mark.parametrize(
    "options",
    [
        {"keepalive_interval": math.inf},
        {"connect_timeout": math.inf},
        {"keepalive_interval": math.inf, "connect_timeout": math.inf},
        {"keepalive_interval": 1, "keepalive_timeout": 2, "connect_timeout": 5},  # ints
        {"keepalive_interval": 0.001, "keepalive_timeout": 0.001},  # the 1 ms minimum
        {"keepalive_without_calls": True, "max_pings_without_data": 4294967295},
        {"max_concurrent_streams": 1},
        {"max_concurrent_streams": 2147483647},
        {"max_receive_message_bytes": 4294967295, "max_send_message_bytes": 4294967295},
    ],
    ids=["no-keepalive", "no-connect-timeout", "both-off", "int-seconds", "minimum-time",
         "pings", "one-stream", "most-streams", "largest-messages"],
)
def test_boundary_and_off_values_are_accepted(worker, options):
    with WorkerConnection(worker.address, **options) as conn:
        assert conn.idle(timeout=5.0) >= 0.0
    assert dict(conn.channel_options) == {k: v for k, v in options.items()}


def test_options_left_at_none_keep_the_defaults():
    # None for every keyword is the plain wool_connect path, with no options object at all.
    with WorkerConnection(NOWHERE, **{name: None for name in EVERY_OPTION}) as conn:
        assert dict(conn.channel_options) == {}


def test_the_options_take_effect_a_tiny_receive_limit_fails_the_answer(worker):
    # Given max_receive_message_bytes=1 (the idle answer is larger), When idle is polled,
    # Then the call fails as libwool documents: TransientRpcError, RESOURCE_EXHAUSTED;
    # And a connection with the default limit to the same worker (another pooled channel,
    # since the options differ) still polls.
    with WorkerConnection(worker.address, max_receive_message_bytes=1) as tiny:
        with pytest.raises(libwool.RpcError) as caught:
            tiny.idle(timeout=5.0)
    with WorkerConnection(worker.address) as default:
        assert default.idle(timeout=5.0) >= 0.0
    error = caught.value
    assert "max_receive_message_bytes" in error.details, error  # the limit took effect
    assert isinstance(error, libwool.TransientRpcError), error
    assert error.code_name == "RESOURCE_EXHAUSTED", error


def test_the_options_object_is_freed_whatever_happens(monkeypatch):
    # Every wool_channel_options_new is matched by one wool_channel_options_free: on success,
    # on a refused option, and on a refused target.
    made, freed = [], []
    new, free = LIBRARY.wool_channel_options_new, LIBRARY.wool_channel_options_free

    def counting_new(out):
        status = new(out)
        made.append(status)
        return status

    def counting_free(options):
        freed.append(True)
        free(options)

    monkeypatch.setattr(LIBRARY, "wool_channel_options_new", counting_new)
    monkeypatch.setattr(LIBRARY, "wool_channel_options_free", counting_free)
    WorkerConnection(NOWHERE, keepalive_interval=5.0).close()
    with pytest.raises(ValueError):
        WorkerConnection(NOWHERE, keepalive_interval=5.0, keepalive_timeout=0.0)
    with pytest.raises(ValueError):
        WorkerConnection("no-port", keepalive_interval=5.0)
    with pytest.raises(TypeError):  # refused before anything is allocated
        WorkerConnection(NOWHERE, keepalive_interval=5.0, keepalive_timeout="1")
    assert made == [0, 0, 0]
    assert len(freed) == 3


# ---------------------------------------------------------------- refused by libwool


@pytest.mark.parametrize("name", SECONDS_OPTIONS)
@pytest.mark.parametrize(
    "value", [0, 0.0, -1, -1.0, -math.inf, math.nan, 0.0005],
    ids=["0", "0.0", "-1", "-1.0", "-inf", "nan", "sub-ms"],
)
def test_bad_seconds_are_refused_by_libwool_naming_the_option(name, value):
    with pytest.raises(ValueError) as caught:
        WorkerConnection(NOWHERE, **{name: value})
    assert str(caught.value).startswith(
        f"wool_channel_options_set_{name}: channel option {name} must be "
    ), caught.value


def test_an_infinite_keepalive_timeout_is_refused_by_libwool():
    with pytest.raises(ValueError, match=r"^wool_channel_options_set_keepalive_timeout: "
                                         r"channel option keepalive_timeout "):
        WorkerConnection(NOWHERE, keepalive_timeout=math.inf)


@pytest.mark.parametrize(
    "name, value",
    [
        ("max_receive_message_bytes", 0),
        ("max_receive_message_bytes", 2**32),
        ("max_send_message_bytes", 0),
        ("max_send_message_bytes", 2**32),
        ("max_concurrent_streams", 0),
        ("max_concurrent_streams", 2**31),
    ],
)
def test_sizes_out_of_range_are_refused_by_libwool_naming_the_option(name, value):
    with pytest.raises(ValueError) as caught:
        WorkerConnection(NOWHERE, **{name: value})
    assert str(caught.value).startswith(
        f"wool_channel_options_set_{name}: channel option {name} must be "
    ), caught.value
    assert str(value) in str(caught.value)


def test_the_first_refused_option_is_the_one_named():
    with pytest.raises(ValueError) as caught:
        WorkerConnection(NOWHERE, max_send_message_bytes=1024, keepalive_interval=5.0,
                         keepalive_timeout=-1.0, max_concurrent_streams=4)
    assert "keepalive_timeout" in str(caught.value)
    assert "keepalive_interval" not in str(caught.value)


# ---------------------------------------------------------------- refused by the binding


@pytest.mark.parametrize(
    "name, value",
    [(name, value) for name in SIZE_OPTIONS for value in (-1, 2**64)]
    + [("max_pings_without_data", -1), ("max_pings_without_data", 2**32)],
)
def test_integers_a_c_type_cannot_hold_are_value_errors_naming_the_option(name, value):
    # ctypes would wrap them silently (-1 to SIZE_MAX, 2**32 to a uint32_t 0 = "no limit").
    with pytest.raises(ValueError, match=rf"^channel option {name} must ") as caught:
        WorkerConnection(NOWHERE, **{name: value})
    assert str(value) in str(caught.value)


@pytest.mark.parametrize(
    "name, value",
    [(name, value) for name in SECONDS_OPTIONS for value in ("1", [1.0], True, 1j)]
    + [(name, value) for name in SIZE_OPTIONS + ["max_pings_without_data"]
       for value in (math.nan, 1.5, 8.0, "8", True)]
    + [("keepalive_without_calls", value) for value in (1, 0, "yes", math.nan)],
)
def test_wrong_types_are_type_errors_naming_the_option(name, value):
    with pytest.raises(TypeError) as caught:
        WorkerConnection(NOWHERE, **{name: value})
    assert str(caught.value).startswith(f"{name} must be "), caught.value


def test_channel_options_are_keyword_only():
    with pytest.raises(TypeError):
        WorkerConnection(NOWHERE, None, 1024)  # noqa: the third positional is refused
    with pytest.raises(TypeError):
        WorkerConnection(NOWHERE, keepalive_time_ms=30000)  # Wool's name, in ms: not ours


# ---------------------------------------------------------------- keepalive


@pytest.fixture
def freezer():
    """Freeze processes with SIGSTOP; every one is thawed (SIGCONT) when the test ends, so
    that the `spawn` fixture can kill and reap it."""
    frozen: list[int] = []

    def freeze(pid: int) -> None:
        frozen.append(pid)
        os.kill(pid, signal.SIGSTOP)

    yield freeze
    for pid in frozen:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass


def _idle_in_thread(conn: WorkerConnection, timeout: float | None, join: float):
    """Run conn.idle(timeout) in a thread; (outcome, seconds taken), or fail when the call
    is still blocked after `join` seconds."""
    outcome: list[object] = []

    def call() -> None:
        started = time.monotonic()
        try:
            result: object = conn.idle(timeout=timeout)
        except BaseException as e:  # noqa: handed to the test
            result = e
        outcome.append((result, time.monotonic() - started))

    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    thread.join(join)
    if thread.is_alive():
        pytest.fail(f"idle(timeout={timeout}) to a frozen worker still blocked after {join} s")
    return outcome[0]


def test_a_call_with_no_timeout_to_a_frozen_worker_ends_by_keepalive(worker, freezer):
    # Given a connection with keepalive 1 s / 1 s that has polled the worker once,
    # When the worker is frozen (SIGSTOP) and idle(timeout=None) is called,
    # Then it ends within about interval + timeout with TransientRpcError UNAVAILABLE saying
    # the worker stopped answering keepalive pings (not never);
    # And once the worker is thawed, the next idle succeeds (the dead connection replaced).
    with WorkerConnection(worker.address, keepalive_interval=1.0, keepalive_timeout=1.0) as conn:
        assert conn.idle(timeout=5.0) >= 0.0
        freezer(worker.proc.pid)
        error, took = _idle_in_thread(conn, None, join=20.0)
        print(f"frozen worker: idle(timeout=None) ended after {took:.2f} s: {error!r}")
        assert isinstance(error, libwool.TransientRpcError), error
        assert not isinstance(error, libwool.HandshakeError), error
        assert error.code_name == "UNAVAILABLE", error
        assert "keepalive" in error.details, error
        assert took < 10.0, f"keepalive 1 s / 1 s took {took:.2f} s"
        os.kill(worker.proc.pid, signal.SIGCONT)
        assert conn.idle(timeout=10.0) >= 0.0
        assert conn.idle() >= 0.0


def test_without_keepalive_only_the_calls_timeout_ends_it(worker, freezer):
    # Given keepalive turned off (math.inf), When the worker is frozen,
    # Then idle(timeout=2) ends by its own deadline (DEADLINE_EXCEEDED), not by keepalive;
    # And once thawed the connection polls again.
    with WorkerConnection(worker.address, keepalive_interval=math.inf) as conn:
        assert conn.idle(timeout=5.0) >= 0.0
        freezer(worker.proc.pid)
        error, took = _idle_in_thread(conn, 2.0, join=20.0)
        assert isinstance(error, libwool.TransientRpcError), error
        assert error.code_name == "DEADLINE_EXCEEDED", error
        assert "keepalive" not in error.details, error
        assert 1.5 <= took < 10.0
        os.kill(worker.proc.pid, signal.SIGCONT)
        assert conn.idle(timeout=10.0) >= 0.0


def test_a_peer_that_never_speaks_ends_calls_at_the_connect_timeout(silent_listener):
    """Given a listener that accepts TCP and never writes a byte, when a connection with a 1 s
    connect timeout polls it (30 s deadline) and stops it (30 s grace, 60 s deadline), then each
    call ends at the connect timeout, long before its deadline or grace: TransientRpcError,
    UNAVAILABLE, saying the peer accepted the connection but never spoke HTTP/2."""
    conn = WorkerConnection(silent_listener, connect_timeout=1.0)
    try:
        started = time.monotonic()
        with pytest.raises(libwool.TransientRpcError) as idle:
            conn.idle(timeout=30.0)
        with pytest.raises(libwool.TransientRpcError) as stop:
            conn.stop(grace=30.0, timeout=60.0)
        took = time.monotonic() - started
    finally:
        conn.close()
    for failure in (idle.value, stop.value):
        assert not isinstance(failure, libwool.HandshakeError)
        assert failure.code_name == "UNAVAILABLE", failure
        assert "accepted the connection but never spoke HTTP/2" in failure.details, failure
    # Two calls, each ended by the 1 s connect timeout; generous, the deadline is 30 s.
    assert took < 20.0, took
