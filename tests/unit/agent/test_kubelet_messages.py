"""The kubelet's plugin messages: kdra's declarations match the wire layout of the kubelet's
APIs (pluginregistration, dra v1 and v1beta1, dra-health v1alpha1), byte for byte."""

from __future__ import annotations

import pytest

from kdra.agent.kubelet.messages import (
    DRA_V1,
    DRA_V1BETA1,
    HEALTHY,
    UNHEALTHY,
    Claim,
    ClaimResult,
    Device,
    DeviceHealth,
    MessageError,
    PluginInfo,
    RegistrationStatus,
    decode_claims,
    decode_empty,
    decode_registration_status,
    encode_empty,
    encode_health,
    encode_plugin_info,
    encode_prepare_response,
    encode_unprepare_response,
)
from tests.unit.agent.kubelet_side import (
    decode_health,
    decode_plugin_info,
    decode_prepare_response,
    decode_unprepare_response,
    encode_claims,
)
from tests.unit.agent.wire_bytes import fields, ld, vi

UID = "7c0b2f4e-0000-4000-8000-000000000001"


def claim_wire(namespace: str, uid: str, name: str) -> bytes:
    return ld(1, namespace) + ld(2, uid) + ld(3, name)


def test_plugin_info_wire_layout() -> None:
    info = PluginInfo("DRAPlugin", "gpu.kdra.dev", "/var/lib/kubelet/plugins/gpu.kdra.dev/dra.sock",
                      ("v1.DRAPlugin", "v1beta1.DRAPlugin"))
    assert encode_plugin_info(info) == (
        ld(1, "DRAPlugin") + ld(2, "gpu.kdra.dev")
        + ld(3, "/var/lib/kubelet/plugins/gpu.kdra.dev/dra.sock")
        + ld(4, "v1.DRAPlugin") + ld(4, "v1beta1.DRAPlugin"))
    assert decode_plugin_info(encode_plugin_info(info)) == info


def test_registration_status_from_the_kubelet() -> None:
    assert decode_registration_status(vi(1, 1)) == RegistrationStatus(True, "")
    refused = ld(2, "version v9 not supported")
    assert decode_registration_status(refused) == RegistrationStatus(
        False, "version v9 not supported")
    assert encode_empty() == b""


def test_empty_requests_ignore_fields_a_newer_kubelet_adds() -> None:
    decode_empty(b"", "InfoRequest")
    decode_empty(ld(7, "from a newer kubelet"), "NodeWatchResourcesRequest")
    with pytest.raises(MessageError, match="InfoRequest"):
        decode_empty(b"\x0a\xff", "InfoRequest")  # a length past the end


@pytest.mark.parametrize("package", [DRA_V1, DRA_V1BETA1])
@pytest.mark.parametrize("method", ["NodePrepareResources", "NodeUnprepareResources"])
def test_claims_of_a_request(package: str, method: str) -> None:
    wire = (ld(1, claim_wire("team-a", UID, "pod-gpu-x7k2p"))
            + ld(1, claim_wire("team-b", "u2", "shared") + ld(9, "unknown field")))
    assert decode_claims(wire, package, method) == [
        Claim("team-a", UID, "pod-gpu-x7k2p"), Claim("team-b", "u2", "shared")]
    assert decode_claims(encode_claims(decode_claims(wire, package, method), package, method),
                         package, method) == decode_claims(wire, package, method)


@pytest.mark.parametrize("garbage", [b"\xff", b"\x0a\x05ab", b"\x0b" * 3])
def test_malformed_requests_raise_message_error(garbage: bytes) -> None:
    with pytest.raises(MessageError, match="NodePrepareResourcesRequest"):
        decode_claims(garbage, DRA_V1, "NodePrepareResources")


def test_prepare_response_wire_layout_v1() -> None:
    device = Device(("gpu",), "node-1", "gpu-0", ("kdra.dev/gpu=u-gpu-0",), "share-1")
    wire = encode_prepare_response({UID: ClaimResult((device,))}, DRA_V1)
    ((number, entry),) = fields(wire)
    assert number == 1 and isinstance(entry, bytes)
    entry_fields = dict(fields(entry))
    assert entry_fields[1] == UID.encode()  # the map's key: the claim UID
    value = entry_fields[2]
    assert isinstance(value, bytes)
    assert value == ld(1, ld(1, "gpu") + ld(2, "node-1") + ld(3, "gpu-0")
                       + ld(4, "kdra.dev/gpu=u-gpu-0") + ld(5, "share-1"))


def test_prepare_response_v1beta1_has_no_share_id_and_empty_share_id_is_absent() -> None:
    shared = Device(("gpu",), "node-1", "gpu-0", ("kdra.dev/gpu=u-gpu-0",), "share-1")
    plain = Device(("gpu",), "node-1", "gpu-1", ("kdra.dev/gpu=u-gpu-1",))
    for package, device in ((DRA_V1BETA1, shared), (DRA_V1, plain)):
        (entry,) = [value for _, value in fields(encode_prepare_response(
            {UID: ClaimResult((device,))}, package))]
        assert isinstance(entry, bytes)
        value = dict(fields(entry))[2]
        assert isinstance(value, bytes)
        (devices,) = [v for n, v in fields(value) if n == 1]
        assert isinstance(devices, bytes)
        assert 5 not in dict(fields(devices)), package


def test_prepare_response_error_and_round_trip() -> None:
    results = {
        "u1": ClaimResult(error="ResourceClaim ns/c: devices are in pool other-node"),
        "u2": ClaimResult((Device(("a", "b"), "n", "cat-0", ("kdra.dev/x=u2-cat-0",)),)),
    }
    wire = encode_prepare_response(results, DRA_V1)
    errors = {}
    for _, entry in fields(wire):
        assert isinstance(entry, bytes)
        parts = dict(fields(entry))
        value = parts.get(2, b"")
        assert isinstance(value, bytes)
        errors[parts[1]] = dict(fields(value)).get(2)
    assert errors == {b"u1": b"ResourceClaim ns/c: devices are in pool other-node", b"u2": None}
    assert decode_prepare_response(wire, DRA_V1) == results


def test_unprepare_response_wire_layout() -> None:
    wire = encode_unprepare_response({UID: "disk full"}, DRA_V1)
    assert wire == ld(1, ld(1, UID) + ld(2, ld(1, "disk full")))
    both = {"a": "", "b": "boom"}
    assert decode_unprepare_response(encode_unprepare_response(both, DRA_V1BETA1),
                                     DRA_V1BETA1) == both


def test_health_wire_layout() -> None:
    report = [DeviceHealth("node-1", "gpu-0", UNHEALTHY, 1767225600, 30),
              DeviceHealth("node-1", "gpu-1", HEALTHY, 1767225600, 30)]
    assert encode_health(report) == (
        ld(1, ld(1, ld(1, "node-1") + ld(2, "gpu-0")) + vi(2, 2) + vi(3, 1767225600) + vi(4, 30))
        + ld(1, ld(1, ld(1, "node-1") + ld(2, "gpu-1")) + vi(2, 1) + vi(3, 1767225600)
             + vi(4, 30)))
    assert decode_health(encode_health(report)) == report
