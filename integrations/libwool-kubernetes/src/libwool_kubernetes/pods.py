"""What a worker pod declares, and the rules that turn a pod into a Wool worker.

Pure functions over `lightkube` `Pod` objects (as the API server sends them): no I/O, so
each rule is testable with real pod JSON. `KubernetesDiscovery` applies them to every pod
its list and watch see.
"""

from __future__ import annotations

import ipaddress
import uuid
from dataclasses import dataclass
from typing import Final

from lightkube.models.core_v1 import Pod
from wool.runtime.worker.metadata import WorkerMetadata

#: The prefix of every annotation this package reads from a worker pod.
ANNOTATION_PREFIX: Final = "wool.libwool.dev/"
#: The worker's gRPC port on the pod IP, decimal (1-65535). Absent: the discovery's ``port``.
PORT: Final = ANNOTATION_PREFIX + "port"
#: The worker's Wool version, PEP 440 (Wool's admission gate compares it with the client's).
#: Absent: the discovery's ``version``; with neither, the pod is skipped.
VERSION: Final = ANNOTATION_PREFIX + "version"
#: ``"true"`` when the worker serves TLS, ``"false"`` when plaintext (case-insensitive).
#: Absent: the discovery's ``secure``.
SECURE: Final = ANNOTATION_PREFIX + "secure"
#: The workload identity the worker's certificate carries (Wool's ``identity``). Absent: the
#: discovery's ``identity``.
IDENTITY: Final = ANNOTATION_PREFIX + "identity"
#: Capability tags, comma-separated (Wool's ``tags``, for ``subscribe(filter=...)``).
TAGS: Final = ANNOTATION_PREFIX + "tags"

#: The largest value, in bytes of UTF-8, accepted for any one of the annotations above. A pod
#: declaring a longer one is skipped (a record is a claim: it must not make a client hold an
#: unbounded string per worker).
MAX_ANNOTATION_BYTES: Final = 1024

#: The ``pid`` every pod-discovered worker gets. A pod cannot declare its worker's process id
#: through annotations written before it starts; Wool's gate ignores ``pid`` but the field must
#: be an int, and the entrypoint runs as the container's first process, PID 1.
POD_WORKER_PID: Final = 1


class PodSkipped(ValueError):
    """A serving pod whose declarations cannot make a worker; ``reason`` says why (one line)."""

    def __init__(self, pod_name: str, reason: str) -> None:
        super().__init__(f"pod {pod_name}: {reason}")
        self.pod_name = pod_name
        self.reason = reason


@dataclass(frozen=True)
class Declared:
    """What a discovery assumes when a pod declares nothing: the defaults of each annotation.

    :param port: the worker's gRPC port (1-65535).
    :param version: the workers' Wool version, or ``None`` to require the annotation.
    :param secure: whether the workers serve TLS.
    :param identity: the workload identity their certificates carry, or ``None``.
    :raises ValueError: if ``port`` is outside 1-65535.
    """

    port: int = 50051
    version: str | None = None
    secure: bool = False
    identity: str | None = None

    def __post_init__(self) -> None:
        if not 1 <= self.port <= 65535:
            raise ValueError(f"port must be 1-65535, got {self.port}")


def pod_name(pod: Pod) -> str:
    """``namespace/name`` of a pod, for log lines (``?`` for a missing part)."""
    meta = pod.metadata
    return f"{(meta and meta.namespace) or '?'}/{(meta and meta.name) or '?'}"


def is_serving(pod: Pod) -> bool:
    """Whether a pod counts as a worker now.

    True when its ``Ready`` condition is ``True``, it has a ``podIP`` and it is not
    terminating (no ``deletionTimestamp``: a pod being deleted is draining and refuses new
    dispatches, even while its readiness has not turned false yet).
    """
    if pod.metadata is None or pod.metadata.deletionTimestamp is not None:
        return False
    status = pod.status
    if status is None or not status.podIP:
        return False
    return any(c.type == "Ready" and c.status == "True" for c in status.conditions or ())


def worker_from_pod(pod: Pod, declared: Declared) -> WorkerMetadata | None:
    """The Wool worker a pod is, ``None`` when it is not serving (see `is_serving`).

    ``uid`` is the pod's UID, ``address`` ``podIP:port`` (``[podIP]:port`` for IPv6), ``pid``
    `POD_WORKER_PID`; ``version``, ``secure``, ``identity``, ``tags`` and the port come from
    the pod's annotations (`VERSION`, `SECURE`, `IDENTITY`, `TAGS`, `PORT`), else ``declared``.

    :raises PodSkipped: if the pod is serving but cannot make a worker: an annotation over
        `MAX_ANNOTATION_BYTES` or malformed, no version from either side, a UID or pod IP that
        does not parse.
    """
    if not is_serving(pod):
        return None
    name = pod_name(pod)
    annotations = _our_annotations(pod, name)
    try:
        uid = uuid.UUID(pod.metadata.uid or "")
    except ValueError:
        raise PodSkipped(name, f"UID {pod.metadata.uid!r} is not a UUID") from None
    version = annotations.get(VERSION, declared.version)
    if not version:
        raise PodSkipped(name, f"no {VERSION} annotation and no default version")
    return WorkerMetadata(
        uid=uid,
        address=_address(name, pod.status.podIP, _port(name, annotations, declared.port)),
        pid=POD_WORKER_PID,
        version=version,
        tags=frozenset(t.strip() for t in annotations.get(TAGS, "").split(",") if t.strip()),
        secure=_secure(name, annotations, declared.secure),
        identity=annotations.get(IDENTITY, declared.identity),
    )


def _our_annotations(pod: Pod, name: str) -> dict[str, str]:
    """The pod's annotations under `ANNOTATION_PREFIX`, each checked against the size bound."""
    ours = {}
    for key, value in (pod.metadata.annotations or {}).items():
        if not key.startswith(ANNOTATION_PREFIX):
            continue
        if len(value.encode()) > MAX_ANNOTATION_BYTES:
            raise PodSkipped(
                name, f"annotation {key} holds {len(value.encode())} bytes, over {MAX_ANNOTATION_BYTES}"
            )
        ours[key] = value
    return ours


def _port(name: str, annotations: dict[str, str], default: int) -> int:
    text = annotations.get(PORT)
    if text is None:
        return default
    if not text.isascii() or not text.isdigit() or not 1 <= int(text) <= 65535:
        raise PodSkipped(name, f"annotation {PORT} {text!r} is not a port (1-65535)")
    return int(text)


def _secure(name: str, annotations: dict[str, str], default: bool) -> bool:
    text = annotations.get(SECURE)
    if text is None:
        return default
    if text.lower() not in ("true", "false"):
        raise PodSkipped(name, f"annotation {SECURE} {text!r} is neither true nor false")
    return text.lower() == "true"


def _address(name: str, pod_ip: str, port: int) -> str:
    try:
        ip = ipaddress.ip_address(pod_ip)
    except ValueError:
        raise PodSkipped(name, f"podIP {pod_ip!r} is not an IP address") from None
    return f"[{ip}]:{port}" if ip.version == 6 else f"{ip}:{port}"
