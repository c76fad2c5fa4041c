"""Wool applications on Kubernetes: discovery of worker pods, and a worker entrypoint for pods.

- `KubernetesDiscovery`: the workers are the Ready pods a label selector picks (Kubernetes API).
- `DnsDiscovery`: the workers are the A records of a headless Service (no API rights needed).
- ``python -m libwool_kubernetes.worker`` (``wool-pod-worker``): Wool's worker in a container,
  SIGTERM drains with a grace, ``/readyz`` and ``/livez`` on a side port.
- `DemandLoadBalancer`: a `WorkerPool` load balancer that tells wool-scaler how many tasks wait
  for a worker while the fleet is at zero, and waits (bounded) for one (`DemandReporter` alone,
  `ScalerTls` for a scaler served over mutual TLS).

The annotations a worker pod carries are named in `libwool_kubernetes.pods`. The names below
are imported on first use, so that importing one module of the package (the worker
entrypoint, say) does not load the Kubernetes and DNS clients.
"""

from importlib import import_module
from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("libwool-kubernetes")
except PackageNotFoundError:  # not installed: a source tree on sys.path
    __version__ = "0+unknown"

_EXPORTS = {
    "DnsDiscovery": "dns",
    "KubernetesDiscovery": "kubernetes",
    "PublishNotSupported": "kubernetes",
    "PORT": "pods",
    "VERSION": "pods",
    "SECURE": "pods",
    "IDENTITY": "pods",
    "TAGS": "pods",
    "DemandLoadBalancer": "demand",
    "DemandReporter": "demand",
    "ScalerTls": "demand",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f".{_EXPORTS[name]}", __name__), name)
    globals()[name] = value
    return value
