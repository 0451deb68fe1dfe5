"""NRI's framing: connection multiplexing and ttrpc messages, fed in any split."""

from __future__ import annotations

import struct

import pytest

from kdra.agent.nri.wire import (
    MAX_MESSAGE,
    MAX_MUX_PAYLOAD,
    MAX_WRITE_FRAME,
    REQUEST,
    RESPONSE,
    MuxDecoder,
    ProtocolError,
    TtrpcDecoder,
    TtrpcMessage,
    mux_frames,
    ttrpc_frame,
)


def frames_of(blob: bytes) -> list[tuple[int, int]]:
    """(connection, payload length) of each frame in ``blob``, read by hand."""
    out, offset = [], 0
    while offset < len(blob):
        conn, length = struct.unpack_from(">II", blob, offset)
        out.append((conn, length))
        offset += 8 + length
    assert offset == len(blob)
    return out


@pytest.mark.parametrize("size", [1, 4087, 4088, 4089, 10_000, 100_000])
def test_mux_frames_split_at_4096_bytes_with_header(size: int) -> None:
    data = bytes(range(256)) * (size // 256 + 1)
    blob = mux_frames(2, data[:size])
    frames = frames_of(blob)
    assert all(conn == 2 for conn, _ in frames)
    assert all(8 + length <= MAX_WRITE_FRAME for _, length in frames)
    assert sum(length for _, length in frames) == size
    assert len(frames) == -(-size // (MAX_WRITE_FRAME - 8))


def test_mux_frames_of_nothing_is_nothing() -> None:
    assert mux_frames(1, b"") == b""


@pytest.mark.parametrize("step", [1, 3, 7, 8, 9, 4096, 1 << 20])
def test_mux_decoder_reassembles_any_split(step: int) -> None:
    blob = mux_frames(1, b"a" * 5000) + mux_frames(2, b"b" * 10) + \
        struct.pack(">II", 7, 0)  # an empty frame on a connection nobody uses
    decoder = MuxDecoder()
    got: list[tuple[int, bytes]] = []
    for start in range(0, len(blob), step):
        got += decoder.feed(blob[start:start + step])
    assert [(c, len(p)) for c, p in got] == [(1, 4088), (1, 912), (2, 10), (7, 0)]
    assert b"".join(p for c, p in got if c == 1) == b"a" * 5000
    assert decoder.buffered == 0


def test_mux_decoder_accepts_a_whole_ttrpc_message_in_one_frame() -> None:
    # containerd writes large messages in large frames (only its reads are 4096-limited)
    decoder = MuxDecoder()
    header = struct.pack(">II", 1, MAX_MUX_PAYLOAD)
    assert decoder.feed(header + b"x" * 100) == []
    assert decoder.feed(b"x" * (MAX_MUX_PAYLOAD - 100)) == [(1, b"x" * MAX_MUX_PAYLOAD)]


def test_mux_decoder_rejects_an_oversized_frame_at_its_header() -> None:
    decoder = MuxDecoder()
    with pytest.raises(ProtocolError, match="mux frame of 4194315 bytes on connection 1"):
        decoder.feed(struct.pack(">II", 1, MAX_MUX_PAYLOAD + 1))
    with pytest.raises(ProtocolError):
        MuxDecoder().feed(b"\xff" * 8)


def test_ttrpc_round_trip_in_any_split() -> None:
    blob = ttrpc_frame(1, REQUEST, b"hello") + ttrpc_frame(3, REQUEST, b"") + \
        ttrpc_frame(2, RESPONSE, b"x" * 300, flags=0)
    for step in (1, 5, 10, 11, 1000):
        decoder = TtrpcDecoder()
        got: list[TtrpcMessage] = []
        for start in range(0, len(blob), step):
            got += decoder.feed(blob[start:start + step])
        assert got == [TtrpcMessage(1, REQUEST, 0, b"hello"), TtrpcMessage(3, REQUEST, 0, b""),
                       TtrpcMessage(2, RESPONSE, 0, b"x" * 300)]


def test_ttrpc_header_layout() -> None:
    assert ttrpc_frame(5, REQUEST, b"ab", flags=4) == b"\x00\x00\x00\x02\x00\x00\x00\x05\x01\x04ab"


@pytest.mark.parametrize(("header", "error"), [
    (struct.pack(">IIBB", MAX_MESSAGE + 1, 1, REQUEST, 0), "ttrpc message of 4194305 bytes"),
    (struct.pack(">IIBB", 0, 1, 9, 0), "unknown ttrpc message type 9"),
    (struct.pack(">IIBB", 0, 1, 0, 0), "unknown ttrpc message type 0"),
])
def test_ttrpc_decoder_rejects_bad_headers(header: bytes, error: str) -> None:
    with pytest.raises(ProtocolError, match=error):
        TtrpcDecoder().feed(header)


def test_ttrpc_frame_refuses_oversized_data() -> None:
    with pytest.raises(ValueError, match="at most 4194304"):
        ttrpc_frame(1, REQUEST, b"x" * (MAX_MESSAGE + 1))
