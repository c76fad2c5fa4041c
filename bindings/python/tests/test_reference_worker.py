"""WorkerConnection against libwool's reference worker (target/debug/wool-worker), plaintext."""

from __future__ import annotations

import ctypes
import gc
import math
import threading
import time

import pytest

import libwool
from libwool import WorkerConnection

from conftest import task_in_flight


# ---------------------------------------------------------------- idle


def test_idle_accrues_on_a_worker_with_nothing_to_do(worker):
    # Given a fresh worker, When idle is polled twice 0.2 s apart,
    # Then both readings are non-negative floats and the second exceeds the first by ~0.2 s.
    with WorkerConnection(worker.address) as conn:
        first = conn.idle(timeout=5.0)
        time.sleep(0.2)
        second = conn.idle(timeout=5.0)
    assert isinstance(first, float) and first >= 0.0
    assert second - first >= 0.15


def test_idle_is_exactly_zero_while_a_task_is_in_flight(worker):
    # Given a sleep(1.0) dispatched with Wool's stubs and acknowledged,
    # When idle is polled during it, Then it reads exactly 0.0 each time;
    # And once the result came back, idle restarts from near zero.
    with WorkerConnection(worker.address) as conn:
        with task_in_flight(worker.address, 1.0) as result:
            readings = [conn.idle(timeout=5.0) for _ in range(3)]
            assert result() == b"1.0"
        after = conn.idle(timeout=5.0)
    assert readings == [0.0, 0.0, 0.0]
    assert 0.0 < after < 0.5


def test_idle_without_timeout_means_no_deadline(worker):
    with WorkerConnection(worker.address) as conn:
        assert conn.idle() >= 0.0
        assert conn.idle(math.inf) >= 0.0


def test_idle_over_a_unix_socket(spawn_worker, tmp_path):
    process = spawn_worker("--listen", f"unix:{tmp_path / 'worker.sock'}")
    with WorkerConnection(f"unix:{tmp_path / 'worker.sock'}") as conn:
        assert conn.idle(timeout=5.0) >= 0.0
    assert process.proc.poll() is None


# ---------------------------------------------------------------- stop


def test_stop_retires_the_worker(worker):
    # Given a running worker, When stop(grace=0) returns,
    # Then the worker process exits 0, and a later idle is a TransientRpcError UNAVAILABLE.
    with WorkerConnection(worker.address) as conn:
        conn.stop(grace=0.0, timeout=10.0)
        assert worker.wait(10) == 0
        with pytest.raises(libwool.TransientRpcError) as caught:
            conn.idle(timeout=2.0)
    assert caught.value.code == 14


@pytest.mark.parametrize("grace", [math.inf, -1.0], ids=["inf", "negative"])
def test_stop_with_unbounded_grace_waits_for_in_flight_work(worker, grace):
    # Given sleep(1.0) in flight, When stop(grace=inf or negative) is called,
    # Then it answers only after the task finished, and the task returned its result.
    with WorkerConnection(worker.address) as conn:
        with task_in_flight(worker.address, 1.0) as result:
            started = time.monotonic()
            conn.stop(grace=grace, timeout=15.0)
            took = time.monotonic() - started
            assert result() == b"1.0"
    assert took >= 0.7
    assert worker.wait(10) == 0


def test_stop_with_zero_grace_cancels_in_flight_work(worker):
    # Given sleep(10) in flight, When stop(grace=0), Then it answers well before 10 s.
    with WorkerConnection(worker.address) as conn:
        with task_in_flight(worker.address, 10.0):
            started = time.monotonic()
            conn.stop(grace=0.0, timeout=10.0)
            assert time.monotonic() - started < 5.0
    assert worker.wait(10) == 0


# ---------------------------------------------------------------- bad arguments


@pytest.mark.parametrize(
    "target",
    ["", "no-port", "127.0.0.1:70000", "127.0.0.1:0", "bogus://host:1", "a\udc80b:1"],
    ids=["empty", "no-port", "port-range", "port-0", "scheme", "not-utf8"],
)
def test_a_bad_target_is_a_value_error_with_the_librarys_message(target):
    with pytest.raises(ValueError, match=r"^wool_connect: "):
        WorkerConnection(target)


@pytest.mark.parametrize("timeout", [0, 0.0, -1.0, math.nan, -math.inf])
def test_a_bad_idle_timeout_is_a_value_error_with_the_librarys_message(unused_address, timeout):
    # The binding passes the number through: libwool's own check answers, before any I/O.
    with WorkerConnection(unused_address) as conn:
        with pytest.raises(ValueError, match=r"^wool_idle: timeout "):
            conn.idle(timeout)


def test_a_nan_grace_is_a_value_error_with_the_librarys_message(unused_address):
    with WorkerConnection(unused_address) as conn:
        with pytest.raises(ValueError, match=r"^wool_stop: grace .*NaN"):
            conn.stop(grace=math.nan)
        with pytest.raises(ValueError, match=r"^wool_stop: timeout "):
            conn.stop(grace=0.0, timeout=0.0)


def test_garbage_pem_is_a_value_error_with_the_librarys_message():
    with pytest.raises(ValueError, match=r"^wool_credentials_from_pem: "):
        libwool.WorkerCredentials.from_pem("garbage", mutual=False)
    with pytest.raises(ValueError, match=r"^wool_credentials_from_pem: "):
        libwool.WorkerCredentials.from_pem(b"garbage", b"garbage", b"garbage")


def test_mutual_tls_without_key_is_a_value_error_with_the_librarys_message():
    with pytest.raises(ValueError, match=r"^wool_credentials_from_pem: mutual TLS needs the "
                                         r"client's key and certificate .* key_pem"):
        libwool.WorkerCredentials.from_pem("garbage")


def test_a_missing_file_is_a_value_error_naming_it(tmp_path):
    missing = tmp_path / "ca.pem"
    with pytest.raises(ValueError, match=r"^wool_credentials_from_files: ") as caught:
        libwool.WorkerCredentials.from_files(missing, mutual=False)
    assert str(missing) in str(caught.value)


def test_python_side_checks_are_type_errors_and_nul_characters():
    # What C cannot be told: a non-str target, a non-number timeout, an embedded NUL
    # (C would silently cut the text there).
    with pytest.raises(TypeError):
        WorkerConnection(b"127.0.0.1:1")
    with pytest.raises(TypeError):
        WorkerConnection(None)
    with pytest.raises(TypeError):
        WorkerConnection("127.0.0.1:1", credentials="not credentials")
    with pytest.raises(ValueError, match="NUL"):
        WorkerConnection("127.0.0.1:1\0garbage")
    with WorkerConnection("127.0.0.1:1") as conn:
        with pytest.raises(TypeError):
            conn.idle("5")
        with pytest.raises(TypeError):
            conn.stop(grace=None)


# ---------------------------------------------------------------- failures of the call


def test_nothing_listening_is_a_transient_error_with_code_unavailable(unused_address):
    with WorkerConnection(unused_address) as conn:
        with pytest.raises(libwool.TransientRpcError) as caught:
            conn.idle(timeout=5.0)
    error = caught.value
    assert (error.code, error.code_name) == (14, "UNAVAILABLE")
    assert not isinstance(error, libwool.HandshakeError)
    assert str(error).startswith("UNAVAILABLE: wool_idle: ")
    assert error.details.startswith("wool_idle: ")


def test_the_timeout_bounds_a_call_nobody_answers(silent_listener):
    # Given a listener that accepts and never answers, When idle(timeout=0.3),
    # Then a TransientRpcError arrives after about 0.3 s.
    with WorkerConnection(silent_listener) as conn:
        started = time.monotonic()
        with pytest.raises(libwool.TransientRpcError):
            conn.idle(timeout=0.3)
        took = time.monotonic() - started
    assert 0.25 <= took < 3.0


def test_a_passed_deadline_reports_deadline_exceeded(silent_listener):
    # Given a fresh connection to a listener that never answers (so the channel is still
    # connecting), When idle(timeout=...), Then the gRPC code is always 4 DEADLINE_EXCEEDED:
    # the call's own deadline passed, whichever of libwool's and tonic's timers fired first.
    for timeout in (0.1, 0.2, 0.3):
        with WorkerConnection(silent_listener) as conn:
            with pytest.raises(libwool.TransientRpcError) as caught:
                conn.idle(timeout=timeout)
        error = caught.value
        assert (error.code, error.code_name) == (4, "DEADLINE_EXCEEDED"), error


def test_a_blocked_call_does_not_hold_the_gil(silent_listener):
    # Given a thread blocked 1 s in idle against a silent listener,
    # When this thread keeps running Python meanwhile, Then it makes steady progress
    # (were the GIL held during the foreign call, it would make none).
    with WorkerConnection(silent_listener) as conn:
        outcomes: list[BaseException] = []

        def blocked_call() -> None:
            try:
                conn.idle(timeout=1.0)
            except BaseException as e:
                outcomes.append(e)

        blocked = threading.Thread(target=blocked_call)
        blocked.start()
        time.sleep(0.1)  # let it enter the foreign call
        ticks = 0
        while blocked.is_alive():
            ticks += sum(range(1000)) > 0  # pure Python work, needs the GIL
            time.sleep(0.001)
        blocked.join()
    assert [type(e) for e in outcomes] == [libwool.TransientRpcError]
    assert ticks >= 100, f"only {ticks} ticks while the other thread was blocked"


# ---------------------------------------------------------------- lifetime and threads


def test_context_manager_closes_and_close_is_idempotent(worker):
    with WorkerConnection(worker.address) as conn:
        assert not conn.closed
        conn.idle(timeout=5.0)
    assert conn.closed
    conn.close()
    conn.close()
    with pytest.raises(ValueError, match="closed"):
        conn.idle()
    with pytest.raises(ValueError, match="closed"):
        conn.stop()


def test_many_threads_share_one_connection(worker):
    # Given one connection, When 16 threads each poll idle 20 times at once,
    # Then every call succeeds with a non-negative reading.
    readings: list[float] = []
    failures: list[BaseException] = []
    barrier = threading.Barrier(16)

    with WorkerConnection(worker.address) as conn:
        def poll() -> None:
            barrier.wait()
            for _ in range(20):
                try:
                    readings.append(conn.idle(timeout=10.0))
                except BaseException as e:
                    failures.append(e)

        threads = [threading.Thread(target=poll) for _ in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
    assert failures == []
    assert len(readings) == 16 * 20
    assert all(r >= 0.0 for r in readings)


def test_close_while_calls_are_in_flight_lets_them_finish(silent_listener):
    # Given 4 threads blocked in idle(timeout=1) on one connection, When it is closed,
    # Then close returns at once, the blocked calls end with their own deadline error
    # (libwool keeps the connection until the last of them), and new calls are refused.
    conn = WorkerConnection(silent_listener)
    outcomes: list[BaseException] = []

    def blocked() -> None:
        try:
            conn.idle(timeout=1.0)
        except BaseException as e:
            outcomes.append(e)

    threads = [threading.Thread(target=blocked) for _ in range(4)]
    for t in threads:
        t.start()
    time.sleep(0.2)
    started = time.monotonic()
    conn.close()
    assert time.monotonic() - started < 0.1
    with pytest.raises(ValueError, match="closed"):
        conn.idle(timeout=1.0)
    for t in threads:
        t.join(10)
    assert [type(e) for e in outcomes] == [libwool.TransientRpcError] * 4
    assert [e.code for e in outcomes] == [4] * 4
    # Released: libwool itself refuses the handle now.
    assert conn._library.wool_idle(conn._handle, 1.0, ctypes.byref(ctypes.c_double())) == 1


def test_an_unclosed_connection_is_released_by_the_collector(worker):
    # The safety net: dropping a connection without close frees the handle, with a
    # ResourceWarning as for an unclosed file.
    conn = WorkerConnection(worker.address)
    conn.idle(timeout=5.0)
    with pytest.warns(ResourceWarning, match="unclosed"):
        del conn
        gc.collect()
    # And the library still works afterwards (the pooled channel was not broken).
    with WorkerConnection(worker.address) as again:
        assert again.idle(timeout=5.0) >= 0.0
