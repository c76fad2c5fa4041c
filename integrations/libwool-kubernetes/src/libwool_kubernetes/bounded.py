"""An httpx transport that bounds what the Kubernetes API server's answers can make us hold."""

from __future__ import annotations

from typing import AsyncIterator, Final

import httpx2 as httpx

#: The most bytes one answer of the API server may hold: a whole answer (a list page of
#: `LIST_PAGE_PODS` pods), or one line of a watch (one event, one pod). The API server's own
#: object limit (etcd's 1.5 MiB request limit by default) keeps real answers far below it.
MAX_ANSWER_BYTES: Final = 32 * 1024 * 1024


class AnswerTooLarge(httpx.ReadError):
    """An answer (or, for a watch, one line of it) passed the transport's bound; the request
    is abandoned. Raised while the body is read."""


class BoundedTransport(httpx.AsyncBaseTransport):
    """Wraps a transport so that no answer body is read past ``max_bytes``.

    A watch (``watch=true`` in the query) is a stream of lines, each one event: the bound holds
    for each line. Any other answer is bounded as a whole.

    :param inner: the transport that does the I/O (its TLS settings are used as they are).
    :param max_bytes: the bound, in bytes (at least 1).
    :raises ValueError: if ``max_bytes`` is below 1.
    """

    def __init__(self, inner: httpx.AsyncBaseTransport, max_bytes: int = MAX_ANSWER_BYTES) -> None:
        if max_bytes < 1:
            raise ValueError(f"max_bytes must be at least 1, got {max_bytes}")
        self._inner = inner
        self._max = max_bytes

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """The inner transport's answer, its body bounded: reading it past the bound raises
        `AnswerTooLarge`."""
        response = await self._inner.handle_async_request(request)
        per_line = request.url.params.get("watch") == "true"
        response.stream = _BoundedStream(response.stream, request, self._max, per_line)
        return response

    async def aclose(self) -> None:
        """Close the inner transport."""
        await self._inner.aclose()


class _BoundedStream(httpx.AsyncByteStream):
    def __init__(self, inner, request: httpx.Request, max_bytes: int, per_line: bool) -> None:
        self._inner = inner
        self._request = request
        self._max = max_bytes
        self._per_line = per_line

    async def __aiter__(self) -> AsyncIterator[bytes]:
        run = 0  # bytes since the last newline (per line), or since the start
        async for chunk in self._inner:
            run = self._count(run, chunk)
            yield chunk

    def _count(self, run: int, chunk: bytes) -> int:
        if not self._per_line:
            return self._checked(run + len(chunk))
        start = 0
        while (newline := chunk.find(b"\n", start)) >= 0:
            self._checked(run + newline - start)
            run, start = 0, newline + 1
        return self._checked(run + len(chunk) - start)

    def _checked(self, run: int) -> int:
        if run > self._max:
            what = "one line of the watch" if self._per_line else "the answer"
            raise AnswerTooLarge(
                f"{what} from {self._request.url.path} passed {self._max} bytes", request=self._request
            )
        return run

    async def aclose(self) -> None:
        await self._inner.aclose()
