"""Pod → worker rules, on pod JSON objects as a real kube-apiserver (v1.36.3) returned them
(tests/data/README.md says how they were made); Wool's own admission gate judges the result."""

from __future__ import annotations

import copy
import json
import uuid

import pytest
from conftest import DATA_DIR
from lightkube.resources.core_v1 import Pod
from wool.runtime.worker.proxy import WorkerProxy

from libwool_kubernetes import pods
from libwool_kubernetes.pods import MAX_ANNOTATION_BYTES, Declared, PodSkipped, is_serving, worker_from_pod

pytestmark = pytest.mark.usefixtures("installed_package")

DEFAULTS = Declared(port=50051, version=None)


def pod_json(name: str) -> dict:
    return json.loads((DATA_DIR / f"{name}.json").read_text())


def pod(name: str = "pod-ready", edit=None) -> Pod:
    """A captured pod, optionally edited (``edit`` gets the JSON dict) before lightkube reads it."""
    data = copy.deepcopy(pod_json(name))
    if edit is not None:
        edit(data)
    return Pod.from_dict(data)


def annotate(key: str, value: str | None):
    def edit(data):
        annotations = data["metadata"].setdefault("annotations", {})
        if value is None:
            annotations.pop(key, None)
        else:
            annotations[key] = value

    return edit


def test_ready_pod_is_a_worker_as_it_declares():
    """Given a Ready pod with its wool.libwool.dev annotations, it is a worker at podIP:port
    with the pod's UID and what it declares."""
    data = pod_json("pod-ready")
    worker = worker_from_pod(pod(), DEFAULTS)
    annotations = data["metadata"]["annotations"]
    assert worker.uid == uuid.UUID(data["metadata"]["uid"])
    assert worker.address == f"{data['status']['podIP']}:{annotations[pods.PORT]}"
    assert worker.pid == pods.POD_WORKER_PID == 1
    assert worker.version == annotations[pods.VERSION]
    assert worker.secure is False
    assert worker.identity is None
    assert worker.tags == frozenset(t.strip() for t in annotations[pods.TAGS].split(","))


@pytest.mark.parametrize("name", ["pod-pending", "pod-not-ready", "pod-terminating"])
def test_pods_that_do_not_serve_are_no_workers(name):
    """Given a pod pending (no IP), Ready=False, or terminating (deletionTimestamp, still
    Ready), it is no worker."""
    assert not is_serving(pod(name))
    assert worker_from_pod(pod(name), DEFAULTS) is None


def test_a_worker_passes_wools_admission_gate():
    """Given the worker a Ready pod makes, a plaintext Wool client admits it (the proxy refuses
    a quorum its gate cannot meet), and refuses it once the pod declares TLS."""
    WorkerProxy(workers=[worker_from_pod(pod(), DEFAULTS)], quorum=1)
    secure = worker_from_pod(pod(edit=annotate(pods.SECURE, "true")), DEFAULTS)
    assert secure.secure is True
    with pytest.raises(ValueError, match="compatible worker count"):
        WorkerProxy(workers=[secure], quorum=1)


def test_defaults_fill_what_a_pod_does_not_declare():
    """Given a pod with none of the annotations, port, version, secure and identity come from
    the discovery's arguments."""

    def strip(data):
        data["metadata"]["annotations"] = {}

    declared = Declared(port=6000, version="0.15.7", secure=True, identity="workers.batch")
    worker = worker_from_pod(pod(edit=strip), declared)
    assert worker.address.endswith(":6000")
    assert (worker.version, worker.secure, worker.identity, worker.tags) == ("0.15.7", True, "workers.batch", frozenset())


def test_no_version_from_either_side_skips_the_pod():
    with pytest.raises(PodSkipped, match="no wool.libwool.dev/version"):
        worker_from_pod(pod(edit=annotate(pods.VERSION, None)), DEFAULTS)


def test_an_annotation_at_the_bound_is_read_and_past_it_skips_the_pod():
    """Given an identity of exactly MAX_ANNOTATION_BYTES it is read; one byte more skips the pod."""
    at = "a" * MAX_ANNOTATION_BYTES
    assert worker_from_pod(pod(edit=annotate(pods.IDENTITY, at)), DEFAULTS).identity == at
    with pytest.raises(PodSkipped, match=f"over {MAX_ANNOTATION_BYTES}"):
        worker_from_pod(pod(edit=annotate(pods.IDENTITY, at + "a")), DEFAULTS)
    multibyte = "é" * (MAX_ANNOTATION_BYTES // 2 + 1)  # fewer characters than the bound, more bytes
    with pytest.raises(PodSkipped):
        worker_from_pod(pod(edit=annotate(pods.TAGS, multibyte)), DEFAULTS)


@pytest.mark.parametrize("value", ["0", "65536", "http", "-1", "５０"])
def test_a_bad_port_annotation_skips_the_pod(value):
    with pytest.raises(PodSkipped, match="is not a port"):
        worker_from_pod(pod(edit=annotate(pods.PORT, value)), DEFAULTS)


def test_a_bad_secure_annotation_skips_the_pod():
    with pytest.raises(PodSkipped, match="neither true nor false"):
        worker_from_pod(pod(edit=annotate(pods.SECURE, "yes")), DEFAULTS)
    assert worker_from_pod(pod(edit=annotate(pods.SECURE, "TRUE")), DEFAULTS).secure is True


def test_an_ipv6_pod_gets_a_bracketed_address():
    def ipv6(data):
        data["status"]["podIP"] = "fd00:10:244::5"

    assert worker_from_pod(pod(edit=ipv6), DEFAULTS).address == "[fd00:10:244::5]:50051"


def test_a_pod_ip_that_is_no_address_skips_the_pod():
    def bogus(data):
        data["status"]["podIP"] = "10.0.0.1:80"

    with pytest.raises(PodSkipped, match="is not an IP address"):
        worker_from_pod(pod(edit=bogus), DEFAULTS)


def test_declared_port_is_checked():
    with pytest.raises(ValueError):
        Declared(port=0)
