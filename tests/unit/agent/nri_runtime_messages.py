"""The runtime's side of kdra's NRI messages — what containerd sends and reads — for the tests
that play the runtime (:mod:`tests.unit.agent.nri_runtime`). kdra only ever plays the plugin,
so these codecs are not in the product (:mod:`kdra.agent.nri.messages` has the plugin's).

They build and read the same declared messages as the plugin's codecs, so a round trip
through both checks kdra's declarations against each other; the byte-level tests
(:mod:`tests.unit.agent.test_nri_messages`) check them against NRI's field numbers.
"""

from __future__ import annotations

from typing import Any

from kdra.agent.nri import messages as nri
from kdra.agent.nri.messages import Configure, Container, CreateContainer, PodSandbox, Synchronize


def _fill_pod(target: Any, pod: PodSandbox) -> None:
    target.id, target.name, target.uid, target.namespace = (pod.id, pod.name, pod.uid,
                                                            pod.namespace)
    target.labels.update(pod.labels)
    target.annotations.update(pod.annotations)


def _fill_container(target: Any, container: Container) -> None:
    target.id, target.pod_sandbox_id, target.name = (container.id, container.pod_sandbox_id,
                                                     container.name)
    target.state = container.state
    target.env.extend(container.env)


def decode_register_plugin(data: bytes) -> tuple[str, str]:
    """(plugin name, index): what the runtime's side reads (tests play the runtime)."""
    message = nri._parse(nri._RegisterPluginRequest, data, "RegisterPluginRequest")
    return message.plugin_name, message.plugin_idx


def encode_configure(request: Configure) -> bytes:
    return nri._encode(nri._ConfigureRequest(
        config=request.config, runtime_name=request.runtime_name,
        runtime_version=request.runtime_version,
        registration_timeout=request.registration_timeout_ms,
        request_timeout=request.request_timeout_ms))


def decode_configure_response(data: bytes) -> int:
    """The subscribed event mask."""
    return int(nri._parse(nri._ConfigureResponse, data, "ConfigureResponse").events)


def encode_synchronize(request: Synchronize) -> bytes:
    message = nri._SynchronizeRequest(more=request.more)
    for pod in request.pods:
        _fill_pod(message.pods.add(), pod)
    for container in request.containers:
        _fill_container(message.containers.add(), container)
    return nri._encode(message)


def decode_synchronize_response(data: bytes) -> bool:
    return bool(nri._parse(nri._SynchronizeResponse, data, "SynchronizeResponse").more)


def encode_create_container(request: CreateContainer) -> bytes:
    message = nri._CreateContainerRequest()
    _fill_pod(message.pod, request.pod)
    _fill_container(message.container, request.container)
    return nri._encode(message)


def decode_create_container_response(data: bytes) -> tuple[tuple[tuple[str, str], ...],
                                                           tuple[str, ...]]:
    """(env, CDI devices) of an adjustment: what the runtime's side reads."""
    m = nri._parse(nri._CreateContainerResponse, data, "CreateContainerResponse")
    return (tuple((kv.key, kv.value) for kv in m.adjust.env),
            tuple(d.name for d in m.adjust.CDI_devices))
