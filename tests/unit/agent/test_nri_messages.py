"""NRI and ttrpc messages: kdra's declarations match the wire layout of NRI's API."""

from __future__ import annotations

import pytest

from kdra.agent.nri.messages import (
    Configure,
    Container,
    CreateContainer,
    MessageError,
    PodSandbox,
    Request,
    Response,
    Synchronize,
    decode_configure,
    decode_create_container,
    decode_request,
    decode_response,
    decode_synchronize,
    encode_configure_response,
    encode_create_container_response,
    encode_empty,
    encode_register_plugin,
    encode_request,
    encode_response,
    encode_synchronize_response,
)
from tests.unit.agent.nri_runtime_messages import (
    decode_configure_response,
    decode_create_container_response,
    decode_register_plugin,
    decode_synchronize_response,
    encode_configure,
    encode_synchronize,
)
from tests.unit.agent.wire_bytes import ld, vi

# Expected bytes are built by hand from NRI's field numbers (tests.unit.agent.wire_bytes),
# so a wrong declaration in kdra fails these tests.


def test_register_plugin_wire_layout() -> None:
    assert encode_register_plugin("kdra", "10") == ld(1, "kdra") + ld(2, "10")
    assert decode_register_plugin(ld(1, "kdra") + ld(2, "10") + ld(3, "v0.11.0")) == \
        ("kdra", "10")


def test_configure_request_from_the_runtime() -> None:
    wire = (ld(1, "cfg") + ld(2, "containerd") + ld(3, "v2.2.9") + vi(4, 5000) + vi(5, 2000)
            + ld(6, "v0.11.0"))
    assert decode_configure(wire) == Configure("containerd", "v2.2.9", 5000, 2000, "cfg")
    assert decode_configure(encode_configure(decode_configure(wire))) == decode_configure(wire)


def test_configure_response_subscribes_to_create_container() -> None:
    assert encode_configure_response(8) == vi(2, 8)
    assert decode_configure_response(vi(2, 8) + vi(3, 1000)) == 8


def pod_wire() -> bytes:
    annotation = ld(1, "resource.kdra.dev/claims") + ld(2, "- name: gpu")
    label = ld(1, "app") + ld(2, "demo")
    return (ld(1, "sandbox-id") + ld(2, "gpu-pod") + ld(3, "pod-uid") + ld(4, "ns")
            + ld(5, label) + ld(6, annotation) + ld(7, "runc")  # runtime_handler: unknown
            + ld(10, "10.0.0.5"))  # ips: unknown to kdra, ignored


def container_wire() -> bytes:
    return (ld(1, "ctr-id") + ld(2, "sandbox-id") + ld(3, "main") + vi(4, 1)
            + ld(6, ld(1, "a") + ld(2, "b")) + ld(7, "/bin/sh") + ld(8, "PATH=/bin")
            + ld(8, "NVIDIA_VISIBLE_DEVICES=all") + vi(14, 1234567))  # created_at: unknown


POD = PodSandbox("sandbox-id", "gpu-pod", "pod-uid", "ns", {"app": "demo"},
                 {"resource.kdra.dev/claims": "- name: gpu"})
CONTAINER = Container("ctr-id", "sandbox-id", "main", 1,
                      ("PATH=/bin", "NVIDIA_VISIBLE_DEVICES=all"))


def test_create_container_request_from_the_runtime() -> None:
    wire = ld(1, pod_wire()) + ld(2, container_wire())
    assert decode_create_container(wire) == CreateContainer(POD, CONTAINER)


def test_create_container_response_wire_layout() -> None:
    wire = encode_create_container_response([("KDRA_DEVICES", "d/n/gpu-0")],
                                            ["kdra.dev/gpu=uid-gpu-0"])
    adjust = ld(4, ld(1, "KDRA_DEVICES") + ld(2, "d/n/gpu-0")) + \
        ld(8, ld(1, "kdra.dev/gpu=uid-gpu-0"))
    assert wire == ld(1, adjust)
    assert decode_create_container_response(wire) == (
        (("KDRA_DEVICES", "d/n/gpu-0"),), ("kdra.dev/gpu=uid-gpu-0",))
    assert encode_create_container_response() == b""  # no adjustment at all


def test_synchronize_round_trip_and_more() -> None:
    wire = ld(1, pod_wire()) + ld(2, container_wire()) + vi(3, 1)
    sync = decode_synchronize(wire)
    assert sync == Synchronize((POD,), (CONTAINER,), True)
    assert decode_synchronize(encode_synchronize(sync)) == sync
    assert encode_synchronize_response(True) == vi(2, 1)
    assert decode_synchronize_response(vi(2, 1)) is True
    assert encode_synchronize_response(False) == b""


def test_ttrpc_envelopes() -> None:
    request = Request("nri.pkg.api.v1alpha1.Runtime", "RegisterPlugin", b"\x01\x02", 5_000_000)
    wire = encode_request(request)
    assert wire == (ld(1, request.service) + ld(2, request.method) + ld(3, b"\x01\x02")
                    + vi(4, 5_000_000))
    assert decode_request(wire + ld(5, ld(1, "k") + ld(2, "v"))) == request
    assert encode_response(Response(payload=b"ok")) == ld(2, b"ok")
    error = encode_response(Response(9, "no"))
    assert error == ld(1, vi(1, 9) + ld(2, "no"))
    assert decode_response(error) == Response(9, "no", b"")
    assert decode_response(ld(1, vi(1, 5) + ld(3, b"details")) + ld(2, b"p")) == \
        Response(5, "", b"p")
    assert encode_empty() == b""


@pytest.mark.parametrize("junk", [
    b"\x0a\xff",  # length runs past the end
    b"\x0a\x02\xff\xfe",  # a string that is not UTF-8
    b"\x07",  # wire type 7 does not exist
    ld(1, ld(6, b"\x0a")),  # a truncated map entry inside the pod
])
def test_malformed_bytes_raise_message_error(junk: bytes) -> None:
    with pytest.raises(MessageError):
        decode_create_container(junk)
    with pytest.raises(MessageError):
        decode_request(junk if junk != ld(1, ld(6, b"\x0a")) else b"\x0a\xff")
