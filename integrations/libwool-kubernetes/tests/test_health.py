"""The probe endpoint over real sockets, and its bounds: head size, head deadline, connections."""

from __future__ import annotations

import asyncio

import pytest

from libwool_kubernetes.health import MAX_CONNECTIONS, MAX_REQUEST_BYTES, HealthServer, bind

pytestmark = pytest.mark.usefixtures("installed_package")

LIMIT = 30.0


async def ask(port: int, request: bytes) -> bytes:
    """Send ``request`` raw, return all that comes back until the server closes (``b""`` when
    it closes unanswered, reset included)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request)
        await writer.drain()
        return await asyncio.wait_for(reader.read(), LIMIT)
    except ConnectionResetError:
        return b""
    finally:
        writer.close()


def serve(ready=lambda: True, **options):
    sock = bind("127.0.0.1", 0)
    return HealthServer(sock, ready, **options), sock.getsockname()[1]


def test_probes_answer_by_path_and_readiness():
    """Given a server whose readiness flips, /livez is 200, /readyz follows readiness, other
    paths are 404 and other methods 405."""

    async def scenario():
        state = {"ready": True}
        server, port = serve(lambda: state["ready"])
        await server.start()
        get = lambda path: ask(port, f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())  # noqa: E731
        assert (await get("/readyz")).startswith(b"HTTP/1.1 200 ")
        state["ready"] = False
        assert (await get("/readyz")).startswith(b"HTTP/1.1 503 ")
        assert (await get("/livez")).startswith(b"HTTP/1.1 200 ")
        assert (await get("/livez?verbose")).startswith(b"HTTP/1.1 200 ")
        assert (await get("/metrics")).startswith(b"HTTP/1.1 404 ")
        assert (await ask(port, b"POST /readyz HTTP/1.1\r\n\r\n")).startswith(b"HTTP/1.1 405 ")
        server.close()

    asyncio.run(scenario())


def test_a_head_past_the_bound_is_refused():
    """Given a request head longer than MAX_REQUEST_BYTES, the answer is 431 and the
    connection is closed."""

    async def scenario():
        server, port = serve()
        await server.start()
        answer = await ask(port, b"GET /readyz HTTP/1.1\r\nX-Pad: " + b"a" * (2 * MAX_REQUEST_BYTES))
        assert answer.startswith(b"HTTP/1.1 431 "), answer
        server.close()

    asyncio.run(scenario())


def test_a_silent_client_is_dropped_at_the_deadline():
    """Given a client that sends nothing, it gets 408 once the head deadline (0.5 s) passes."""

    async def scenario():
        server, port = serve(request_deadline=0.5)
        await server.start()
        answer = await ask(port, b"")
        assert answer.startswith(b"HTTP/1.1 408 "), answer
        server.close()

    asyncio.run(scenario())


def test_connections_past_the_bound_are_closed():
    """Given MAX_CONNECTIONS clients holding connections open, one more is closed unanswered,
    and once they leave, probes are answered again."""

    async def scenario():
        server, port = serve(request_deadline=LIMIT)
        await server.start()
        holders = [await asyncio.open_connection("127.0.0.1", port) for _ in range(MAX_CONNECTIONS)]
        await asyncio.sleep(0)  # let the server take them in
        deadline = asyncio.get_running_loop().time() + LIMIT
        while (answer := await ask(port, b"GET /livez HTTP/1.1\r\n\r\n")) != b"":
            assert asyncio.get_running_loop().time() < deadline, "precondition not met: the holders were never all taken in"
            await asyncio.sleep(0.05)
        for _, writer in holders:
            writer.close()
        while not (answer := await ask(port, b"GET /livez HTTP/1.1\r\n\r\n")).startswith(b"HTTP/1.1 200 "):
            assert asyncio.get_running_loop().time() < deadline, answer
            await asyncio.sleep(0.05)
        server.close()

    asyncio.run(scenario())
