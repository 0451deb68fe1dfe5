"""kdra's NRI plugin against a scripted runtime side on a real unix socket: registration,
Configure, split Synchronize, CreateContainer answers, malformed input, reconnects."""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from kdra.agent import metrics
from kdra.agent.core.exposure import Adjustment, Decision, Refusal
from kdra.agent.nri.messages import Configure, Container, CreateContainer, PodSandbox, Synchronize
from kdra.agent.nri.plugin import EVENTS, NriPlugin
from kdra.agent.nri.session import Session
from kdra.agent.nri.wire import REQUEST, ttrpc_frame
from tests.unit.agent.nri_runtime import PluginConnection, Runtime
from tests.unit.agent.nri_runtime_messages import (
    decode_configure_response,
    decode_create_container_response,
    decode_synchronize_response,
    encode_configure,
    encode_create_container,
    encode_synchronize,
)

POD = PodSandbox("sb", "p", "pod-uid", "ns", {}, {})


def create(name: str = "main") -> bytes:
    return encode_create_container(CreateContainer(POD, Container("c1", "sb", name)))


def sample(name: str, **labels: str) -> float:
    value = metrics.REGISTRY.get_sample_value(name, labels or None)
    return value or 0.0


def policy(pod: PodSandbox, container: Container) -> Decision:
    if container.name == "refused":
        return Refusal("kdra: ResourceClaim ns/c is not prepared on node n", "ns/c")
    if container.name == "boom":
        raise RuntimeError("a bug")
    if container.name == "big":  # an answer larger than one 4096-byte frame
        devices = tuple(f"kdra.dev/gpu=uid-{i:04d}-gpu-{i}" for i in range(300))
        return Adjustment(devices, (("KDRA_DEVICES", "x" * 5000),), devices)
    return Adjustment(("kdra.dev/gpu=uid-gpu-0",), (("KDRA_DEVICES", "g/n/gpu-0"),),
                      ("g/n/gpu-0",))


Scenario = Callable[[NriPlugin, Runtime], Awaitable[None]]


def run(tmp_path: Path, scenario: Scenario, *, start_runtime: bool = True) -> None:
    async def main() -> None:
        runtime = Runtime(tmp_path / "nri.sock")
        if start_runtime:
            await runtime.start()
        plugin = NriPlugin(str(runtime.path), policy, first_delay=0.02, max_delay=0.1)
        task = asyncio.create_task(plugin.run())
        try:
            await asyncio.wait_for(scenario(plugin, runtime), 30)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await runtime.stop()
    asyncio.run(main())


async def registered(runtime: Runtime) -> PluginConnection:
    conn = await runtime.next()
    assert await asyncio.wait_for(conn.registered, 5) == ("kdra", "10")
    return conn


def test_lifecycle_register_configure_sync_create(tmp_path: Path) -> None:
    async def scenario(plugin: NriPlugin, runtime: Runtime) -> None:
        conn = await registered(runtime)
        await asyncio.wait_for(plugin.registered.wait(), 5)
        assert sample("kdra_agent_nri_connected") == 1
        answer = await conn.call("Configure", encode_configure(
            Configure("containerd", "v2.2.9", 5000, 1500)))
        assert answer.code == 0 and decode_configure_response(answer.payload) == EVENTS == 8
        assert plugin.request_timeout == 1.5
        # a split sync: every part but the last says more=true and gets more=true back
        pods = tuple(PodSandbox(f"sb{i}", f"p{i}", f"u{i}", "ns") for i in range(3))
        answer = await conn.call("Synchronize", encode_synchronize(Synchronize(pods, (), True)))
        assert answer.code == 0 and decode_synchronize_response(answer.payload) is True
        assert not plugin.synchronized.is_set()
        answer = await conn.call("Synchronize", encode_synchronize(Synchronize(pods, ())))
        assert answer.code == 0 and decode_synchronize_response(answer.payload) is False
        assert plugin.synchronized.is_set()
        before = sample("kdra_agent_nri_adjustments_total", result="adjusted")
        answer = await conn.call("CreateContainer", create())
        assert answer.code == 0
        assert decode_create_container_response(answer.payload) == (
            (("KDRA_DEVICES", "g/n/gpu-0"),), ("kdra.dev/gpu=uid-gpu-0",))
        assert sample("kdra_agent_nri_adjustments_total", result="adjusted") == before + 1
        answer = await conn.call("Shutdown", b"")
        assert answer.code == 0
        answer = await conn.call("StopContainer", b"")
        assert answer.code == 12  # not subscribed: UNIMPLEMENTED
    run(tmp_path, scenario)


def test_refusal_and_bugs_answer_with_a_status_and_keep_the_connection(tmp_path: Path) -> None:
    async def scenario(plugin: NriPlugin, runtime: Runtime) -> None:
        conn = await registered(runtime)
        refused = sample("kdra_agent_nri_adjustments_total", result="refused")
        errors = sample("kdra_agent_nri_adjustments_total", result="error")
        answer = await conn.call("CreateContainer", create("refused"))
        assert (answer.code, answer.message) == (
            9, "kdra: ResourceClaim ns/c is not prepared on node n")
        answer = await conn.call("CreateContainer", create("boom"))
        assert answer.code == 13 and "internal error" in answer.message \
            and "a bug" in answer.message
        answer = await conn.call("CreateContainer", create())
        assert answer.code == 0  # same connection, still serving
        assert sample("kdra_agent_nri_adjustments_total", result="refused") == refused + 1
        assert sample("kdra_agent_nri_adjustments_total", result="error") == errors + 1
        assert runtime.connections.empty()
    run(tmp_path, scenario)


def test_large_answers_are_split_into_4096_byte_frames(tmp_path: Path) -> None:
    async def scenario(plugin: NriPlugin, runtime: Runtime) -> None:
        conn = await registered(runtime)
        answer = await conn.call("CreateContainer", create("big"))
        env, devices = decode_create_container_response(answer.payload)
        assert len(devices) == 300 and env == (("KDRA_DEVICES", "x" * 5000),)
        assert len(conn.frame_sizes) > 4 and max(conn.frame_sizes) <= 4096
    run(tmp_path, scenario)


@pytest.mark.parametrize("junk", [
    struct.pack(">II", 1, (4 << 20) + 11),  # a mux frame larger than any ttrpc message
    ttrpc_frame(1, 7, b""),  # an unknown ttrpc message type
    ttrpc_frame(1, REQUEST, b"\x0a\xff"),  # a request envelope that does not decode
    ttrpc_frame(2, REQUEST, b""),  # a request on an even (server-side) stream id
], ids=["oversized-frame", "bad-type", "bad-envelope", "even-stream"])
def test_malformed_input_drops_the_connection_and_the_plugin_reconnects(
        tmp_path: Path, junk: bytes) -> None:
    async def scenario(plugin: NriPlugin, runtime: Runtime) -> None:
        conn = await registered(runtime)
        if junk.startswith(struct.pack(">I", 1)) and len(junk) == 8:
            conn.write_raw(junk)
        else:
            conn.write(junk)
        await asyncio.wait_for(conn.closed.wait(), 5)  # the plugin hung up
        again = await registered(runtime)  # ... and came back
        answer = await again.call("CreateContainer", create())
        assert answer.code == 0
    run(tmp_path, scenario)


def test_malformed_payload_of_a_known_method_drops_the_connection(tmp_path: Path) -> None:
    async def scenario(plugin: NriPlugin, runtime: Runtime) -> None:
        conn = await registered(runtime)
        with pytest.raises(ConnectionError):
            await conn.call("CreateContainer", b"\x12\xff")
        await registered(runtime)
    run(tmp_path, scenario)


def test_refused_registration_is_retried(tmp_path: Path) -> None:
    async def scenario(plugin: NriPlugin, runtime: Runtime) -> None:
        runtime.refuse_registration = "invalid plugin index"
        first = await runtime.next()
        await asyncio.wait_for(first.closed.wait(), 5)
        assert not plugin.registered.is_set()
        runtime.refuse_registration = ""
        while True:  # refused attempts may still be queued
            conn = await runtime.next()
            if not conn.refuse:
                break
        assert await asyncio.wait_for(conn.registered, 5) == ("kdra", "10")
        await asyncio.wait_for(plugin.registered.wait(), 5)
    run(tmp_path, scenario)


def test_runtime_restart_and_missing_socket(tmp_path: Path,
                                            caplog: pytest.LogCaptureFixture) -> None:
    async def scenario(plugin: NriPlugin, runtime: Runtime) -> None:
        await asyncio.sleep(0.5)  # several attempts on a socket that does not exist
        await runtime.start()
        conn = await registered(runtime)
        await conn.close()
        await runtime.stop()  # the runtime goes away ...
        runtime.path.unlink()
        for _ in range(100):
            if not plugin.registered.is_set():
                break
            await asyncio.sleep(0.05)
        assert sample("kdra_agent_nri_connected") == 0
        await runtime.start()  # ... and comes back: the plugin registers again
        await registered(runtime)
        await asyncio.wait_for(plugin.registered.wait(), 5)
        assert sample("kdra_agent_nri_connected") == 1
    with caplog.at_level(logging.WARNING, logger="kdra.agent.nri.plugin"):
        run(tmp_path, scenario, start_runtime=False)
    cannot = [r for r in caplog.records if "cannot connect" in r.getMessage()]
    assert len(cannot) == 2  # once per outage, however many attempts


def test_a_handler_past_the_callers_deadline_is_answered_deadline_exceeded(
        tmp_path: Path) -> None:
    async def slow(service: str, method: str, payload: bytes) -> bytes:
        await asyncio.sleep(5)
        return b""

    async def main() -> None:
        runtime = Runtime(tmp_path / "s.sock")
        await runtime.start()
        reader, writer = await asyncio.open_unix_connection(str(runtime.path))
        session = Session(reader, writer, slow)
        serving = asyncio.create_task(session.run())
        conn = await runtime.next()
        answer = await conn.call("CreateContainer", b"", within=3, deadline=0.2)
        assert answer.code == 4  # DEADLINE_EXCEEDED, and the session goes on
        assert not session.closed
        session.close("done")
        await session.wait_closed()
        await asyncio.gather(serving, return_exceptions=True)
        await runtime.stop()

    asyncio.run(main())
