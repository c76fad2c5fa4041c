"""The worker's probe endpoint: plain HTTP ``GET /livez`` and ``GET /readyz`` for the kubelet.

Plain HTTP rather than gRPC health: Wool's server holds no health service and offers no hook
to add one, kubelet's ``httpGet`` probe needs nothing in the image, and a probe on a side port
is never a dispatch (Wool's version interceptor and stop path never see it).

Bounded, as it answers whoever reaches the pod: a request head of at most
`MAX_REQUEST_BYTES`, read within `REQUEST_DEADLINE` seconds, at most `MAX_CONNECTIONS` open at
once (more are closed at once); one answer per connection, then it is closed.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Callable, Final

MAX_REQUEST_BYTES: Final = 4096
REQUEST_DEADLINE: Final = 5.0
MAX_CONNECTIONS: Final = 64


class HealthServer:
    """Answers ``/livez`` (200 while the worker's event loop runs) and ``/readyz`` (200 while
    ``ready()`` is true, else 503); any other path 404, any other method 405.

    :param sock: a bound, listening TCP socket (bound before the worker starts, so a taken port
        fails the start).
    :param ready: whether the worker takes dispatches now (called on the event loop).
    :param request_deadline: seconds a client has to send its request head.
    """

    def __init__(
        self,
        sock: socket.socket,
        ready: Callable[[], bool],
        *,
        request_deadline: float = REQUEST_DEADLINE,
    ) -> None:
        self._sock = sock
        self._ready = ready
        self._deadline = request_deadline
        self._open = 0
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        """Start answering on the socket (on the running event loop)."""
        self._server = await asyncio.start_server(self._answer, sock=self._sock, limit=MAX_REQUEST_BYTES)

    def close(self) -> None:
        """Stop accepting connections."""
        if self._server is not None:
            self._server.close()

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._open >= MAX_CONNECTIONS:
            writer.close()
            return
        self._open += 1
        try:
            status, body = await self._respond(reader)
            writer.write(
                f"HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {len(body) + 1}\r\n"
                f"Connection: close\r\n\r\n{body}\n".encode()
            )
            await asyncio.wait_for(writer.drain(), self._deadline)
        except (OSError, asyncio.TimeoutError):
            pass
        finally:
            self._open -= 1
            writer.close()

    async def _respond(self, reader: asyncio.StreamReader) -> tuple[str, str]:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), self._deadline)
        except asyncio.LimitOverrunError:
            return "431 Request Header Fields Too Large", "request head too large"
        except (asyncio.IncompleteReadError, asyncio.TimeoutError):
            return "408 Request Timeout", "no complete request"
        method, _, rest = head.decode("latin-1").partition(" ")
        path = rest.partition(" ")[0].partition("?")[0]
        if path not in ("/livez", "/readyz"):
            return "404 Not Found", "not found"
        if method != "GET":
            return "405 Method Not Allowed", "method not allowed"
        if path == "/livez":
            return "200 OK", "ok"
        return ("200 OK", "ready") if self._ready() else ("503 Service Unavailable", "not ready")


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (port 0: any free port).

    :raises OSError: if the address cannot be bound.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(MAX_CONNECTIONS)
    except OSError:
        sock.close()
        raise
    sock.setblocking(False)
    return sock
