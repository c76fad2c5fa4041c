"""`KubernetesDiscovery`'s stream through lightkube over real HTTP, against a stand-in API
server on loopback that can misbehave as a real one cannot be made to on demand: a watch
expired (410), a line past the bound, a pod past the annotation bound. (The real
kube-apiserver is the Kubernetes suite's: tests/kubernetes.)"""

from __future__ import annotations

import asyncio
import json
import logging
import urllib.parse

import httpx2 as httpx
import pytest
from conftest import DATA_DIR

from libwool_kubernetes import KubernetesDiscovery
from libwool_kubernetes import pods as annotations
from libwool_kubernetes.bounded import MAX_ANSWER_BYTES, AnswerTooLarge, BoundedTransport

pytestmark = pytest.mark.usefixtures("installed_package")

LIMIT = 30.0


def captured(name: str, uid: str) -> dict:
    pod = json.loads((DATA_DIR / f"{name}.json").read_text())
    pod["metadata"]["uid"] = uid
    pod["metadata"]["name"] = f"worker-{uid[:4]}"
    return pod


class StandInApi:
    """Answers pod lists from ``pods`` and holds watches open, writing what `event` and `raw`
    give it. Counts lists and watches."""

    def __init__(self) -> None:
        self.pods: list[dict] = []
        self.version = 100
        self.lists = 0
        self.watches = 0
        self._open: list[asyncio.Queue] = []

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self._server.sockets[0].getsockname()[1]

    def event(self, kind: str, pod: dict) -> None:
        self.version += 1
        pod["metadata"]["resourceVersion"] = str(self.version)
        self.raw(json.dumps({"type": kind, "object": pod}).encode() + b"\n")

    def raw(self, data: bytes) -> None:
        for queue in self._open:
            queue.put_nowait(data)

    async def _serve(self, reader, writer) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(head.split(b" ")[1].decode()).query)
        if query.get("watch") == ["true"]:
            await self._watch(reader, writer)
        else:
            self.lists += 1
            body = json.dumps({"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": str(self.version)},
                               "items": self.pods}).encode()
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                         b"Connection: close\r\n\r\n%s" % (len(body), body))
            await writer.drain()
            writer.close()

    async def _watch(self, reader, writer) -> None:
        self.watches += 1
        queue: asyncio.Queue = asyncio.Queue()
        self._open.append(queue)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n")
        hung_up = asyncio.ensure_future(reader.read())
        try:
            while True:
                line = asyncio.ensure_future(queue.get())
                await asyncio.wait({line, hung_up}, return_when=asyncio.FIRST_COMPLETED)
                if hung_up.done():
                    line.cancel()
                    return
                writer.write(line.result())
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            self._open.remove(queue)
            writer.close()


async def until(condition, what: str) -> None:
    deadline = asyncio.get_running_loop().time() + LIMIT
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            pytest.fail(f"precondition not met within {LIMIT:g} s: {what}")
        await asyncio.sleep(0.02)


@pytest.fixture
def api_kubeconfig(tmp_path, monkeypatch):
    """A kubeconfig naming the stand-in API server (namespace batch); returns a setter for its port."""

    def point_at(port: int) -> None:
        path = tmp_path / "kubeconfig"
        path.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "test",
            "clusters": [{"name": "stand-in", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
            "users": [{"name": "reader", "user": {"token": "not-a-secret"}}],
            "contexts": [{"name": "test", "context": {"cluster": "stand-in", "user": "reader", "namespace": "batch"}}],
        }))
        monkeypatch.setenv("KUBECONFIG", str(path))

    return point_at


A, B, C = "0a0a0a0a-0000-4000-8000-00000000000a", "0b0b0b0b-0000-4000-8000-00000000000b", "0c0c0c0c-0000-4000-8000-00000000000c"


def test_list_watch_relist(api_kubeconfig, caplog):
    """Given pods listed then watched, the stream follows readiness and deletion, lists again
    on a 410, after a line past the bound, and skips a pod past the annotation bound with a
    warning, never ending."""

    async def scenario():
        api = StandInApi()
        api_kubeconfig(await api.start())
        api.pods = [captured("pod-ready", A), captured("pod-pending", B)]
        stream = aiter(KubernetesDiscovery("app=wool", max_workers=10).subscriber)
        step = lambda: asyncio.wait_for(anext(stream), LIMIT)  # noqa: E731

        first = await step()
        assert (first.type, str(first.metadata.uid)) == ("worker-added", A)
        following = asyncio.ensure_future(step())  # the stream moves on only while it is read
        await until(lambda: api.watches == 1, "the first watch")

        api.event("MODIFIED", captured("pod-ready", B))
        assert ((e := await following).type, str(e.metadata.uid)) == ("worker-added", B)
        api.event("MODIFIED", captured("pod-terminating", A))
        assert ((e := await step()).type, str(e.metadata.uid)) == ("worker-dropped", A)

        huge = captured("pod-ready", A)
        huge["metadata"]["annotations"][annotations.IDENTITY] = "x" * (annotations.MAX_ANNOTATION_BYTES + 1)
        api.event("MODIFIED", huge)
        api.pods = [captured("pod-ready", B), captured("pod-ready", C)]
        api.raw(json.dumps({"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                                         "reason": "Expired", "code": 410,
                                                         "message": "too old resource version"}}).encode() + b"\n")
        assert ((e := await step()).type, str(e.metadata.uid)) == ("worker-added", C)
        assert api.lists == 2
        following = asyncio.ensure_future(step())
        await until(lambda: api.watches == 2, "the watch after the 410")

        api.pods = [captured("pod-ready", C)]
        api.raw(b"[" * (MAX_ANSWER_BYTES + 1))
        assert ((e := await following).type, str(e.metadata.uid)) == ("worker-dropped", B)
        assert api.lists == 3
        await stream.aclose()

    with caplog.at_level(logging.INFO, logger="libwool_kubernetes"):
        asyncio.run(scenario())
    messages = [r.getMessage() for r in caplog.records]
    assert any("over 1024; the pod is left out" in m for m in messages), messages
    assert any("410 Gone" in m for m in messages), messages
    assert any("AnswerTooLarge" in m and "listing again in" in m for m in messages), messages


def test_cancelling_the_reading_task_ends_the_stream(api_kubeconfig, caplog):
    """Given a task reading the stream while its watch waits for an event (as a client's
    watcher, or Wool's proxy at the pool's exit, does), cancelling the task ends the stream:
    the task ends cancelled and nothing is listed again."""

    async def scenario():
        api = StandInApi()
        api_kubeconfig(await api.start())
        api.pods = [captured("pod-ready", A)]
        seen = []

        async def read():
            async for event in KubernetesDiscovery("app=wool", max_workers=10).subscriber:
                seen.append(event)

        task = asyncio.ensure_future(read())
        await until(lambda: api.watches == 1 and seen, "the first watch")
        await asyncio.sleep(0.2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, LIMIT)
        await asyncio.sleep(0.5)
        assert api.lists == 1

    with caplog.at_level(logging.INFO, logger="libwool_kubernetes"):
        asyncio.run(scenario())
    again = [r.getMessage() for r in caplog.records if "listing again" in r.getMessage()]
    assert not again, again


def test_bounded_transport_bounds_answers_and_watch_lines():
    """Given answers from a real HTTP server, a plain answer is bounded as a whole and a
    watch's lines one by one (many lines under the bound pass, one past it fails)."""

    async def serve(reader, writer):
        head = await reader.readuntil(b"\r\n\r\n")
        watch = b"watch=true" in head.split(b"\r\n")[0]
        body = (b"y" * 900 + b"\n") * 5 if watch else b"z" * 1001
        if b"long-line" in head:
            body = b"y" * 1001 + b"\n"
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body))
        await writer.drain()
        writer.close()

    async def scenario():
        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        base = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        async with httpx.AsyncClient(transport=BoundedTransport(httpx.AsyncHTTPTransport(), 1000)) as client:
            with pytest.raises(AnswerTooLarge, match="the answer from /pods passed 1000 bytes"):
                await client.get(f"{base}/pods")
            assert len((await client.get(f"{base}/pods?watch=true")).content) == 4505
            with pytest.raises(AnswerTooLarge, match="one line of the watch"):
                await client.get(f"{base}/long-line?watch=true")
        server.close()

    asyncio.run(scenario())
    with pytest.raises(ValueError):
        BoundedTransport(httpx.AsyncHTTPTransport(), 0)
