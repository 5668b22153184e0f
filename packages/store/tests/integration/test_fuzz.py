"""Fuzzing the node's frame decoder: random bytes and mutated valid frames over raw sockets.

The node runs in a child process and is restarted if an input kills it, so hypothesis can
shrink the input that did. Every complete frame the native verifier rejects must be answered
with an ErrorReply or a closed connection; whatever is sent, the node keeps serving.
"""

from __future__ import annotations

import contextlib
import os
import struct
from collections.abc import Iterator
from typing import Any

import hypothesis
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rayfield.store import PROTOCOL_VERSION, StoreClient, _native
from rayfield.store.protocol.fb import Body
from rayfield.store.testing import node_process

MAX_FRAME = 1 << 16
# `nox -s fuzz` raises the number of examples through this variable.
EXAMPLES = int(os.environ.get("RAYFIELD_FUZZ_EXAMPLES", "150"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
verify_frame = _native.verify_frame


class _Node:
    """A node process that is restarted after an input killed it."""

    def __init__(self, directory: Any) -> None:
        self.directory, self.stack, self.checks = directory, contextlib.ExitStack(), 0
        self.proc = self.stack.enter_context(
            node_process(directory, 16 << 20, max_frame_bytes=MAX_FRAME)
        )

    def check(self, sent: bytes, full: bool = False) -> None:
        """Fail (and restart the node) if it died; every 25 calls, check a client works."""
        if not self.proc.alive():
            log = self.proc.log()[-3000:]
            self.stack.close()
            self.stack = contextlib.ExitStack()
            self.proc = self.stack.enter_context(
                node_process(self.directory, 16 << 20, max_frame_bytes=MAX_FRAME)
            )
            raise AssertionError(f"the node died on input {sent!r}; its log ends:\n{log}")
        self.checks += 1
        if full or self.checks % 25 == 0:
            with StoreClient(self.proc.socket_path, timeout_s=5.0) as client:
                oid = os.urandom(20)
                client.put(oid, b"alive")
                [buf] = client.get([oid], timeout_s=5.0)
                assert bytes(buf) == b"alive"
                buf.release()


@pytest.fixture(scope="module")
def fuzz_node(tmp_path_factory: Any) -> Iterator[_Node]:
    node = _Node(tmp_path_factory.mktemp("fuzz"))
    try:
        yield node
    finally:
        node.stack.close()


def _valid_payloads(wire: Any) -> list[bytes]:
    """Frame flatbuffers (no length prefix) of every kind a client sends."""
    oid, other = bytes(range(20)), bytes(range(20, 40))
    hello = wire.hello(PROTOCOL_VERSION)
    ids = Body.Body
    return [
        wire.payload(hello),
        wire.payload(hello, wire.empty(ids.StatsRequest), wire.empty(ids.ListRequest)),
        wire.payload(hello, wire.put(oid, b"data" * 10, b"meta"), wire.get([oid, other], 0)),
        wire.payload(hello, wire.create(other, 100, 4), wire.seal(other)),
        wire.payload(hello, wire.ids_request(ids.ContainsRequest, [oid, other])),
        wire.payload(hello, wire.ids_request(ids.DeleteRequest, [oid])),
        wire.payload(hello, wire.ids_request(ids.ReleaseRequest, [oid])),
        wire.payload(hello, wire.empty(ids.SubscribeRequest)),
        wire.payload(wire.get([oid], -1)),
        wire.payload(wire.hello(PROTOCOL_VERSION + 1)),
    ]


@st.composite
def _structured(draw: Any, wire: Any) -> bytes:
    """Well-formed frames with hostile contents: any body type (replies, unknown types and
    empty tables included), missing fields, extreme sizes and timeouts, odd sequence numbers."""
    ids = st.one_of(st.just(bytes(20)), st.binary(min_size=20, max_size=20))
    sizes = st.one_of(st.integers(0, 4096), st.sampled_from([2**31, 2**32, 2**63 - 1, 2**64 - 1]))
    timeouts = st.sampled_from([0, 1, -1, -(2**63), 2**63 - 1])
    id_bodies = [Body.Body.ReleaseRequest, Body.Body.ContainsRequest, Body.Body.DeleteRequest]
    body = st.one_of(
        st.builds(wire.hello, st.sampled_from([PROTOCOL_VERSION, 0, 2**32 - 1])),
        st.builds(wire.create, ids, sizes, sizes),
        st.builds(wire.put, ids, st.binary(max_size=256), st.binary(max_size=64)),
        st.builds(wire.seal, ids),
        st.builds(wire.get, st.lists(ids, max_size=5), timeouts),
        st.builds(wire.ids_request, st.sampled_from(id_bodies), st.lists(ids, max_size=5)),
        st.builds(wire.empty, st.sampled_from([*range(1, 28), 28, 99, 255])),
    )
    messages = draw(st.lists(body, min_size=0, max_size=6))
    if draw(st.integers(0, 9)):  # mostly after a proper handshake
        messages.insert(0, wire.hello(PROTOCOL_VERSION))
    return wire.payload(*messages, seq=draw(st.sampled_from([0, 1, 2**64 - 1])))


@st.composite
def _mutated(draw: Any, wire: Any) -> bytes:
    base = st.one_of(st.sampled_from(_valid_payloads(wire)), _structured(wire))
    data = bytearray(draw(base))
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(["flip", "byte", "u32", "cut", "insert", "delete"]))
        at = draw(st.integers(0, max(len(data) - 1, 0)))
        if op == "flip" and data:
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif op == "byte" and data:
            data[at] = draw(st.integers(0, 255))
        elif op == "u32" and len(data) >= 4:
            at -= at % 4
            value = draw(st.sampled_from([0, 1, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, len(data)]))
            data[at : at + 4] = struct.pack("<I", value)
        elif op == "cut":
            del data[at:]
        elif op == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=16))
        elif op == "delete":
            del data[at : at + draw(st.integers(1, 16))]
    return bytes(data)


def _replies(wire: Any, sock: Any, timeout_s: float) -> str:
    """Read every reply until the node goes quiet or closes; each must pass the verifier."""
    while True:
        sock.settimeout(timeout_s)
        try:
            payload = wire.read_frame(sock)
        except (TimeoutError, OSError):
            return "quiet"
        if payload is None:
            return "closed"
        if verify_frame is not None:
            assert verify_frame(payload), f"the node sent a malformed frame: {payload!r}"
        wire.messages(payload)


def _send_and_judge(node: _Node, wire: Any, payload: bytes, framing: str) -> None:
    """Send one input on a fresh connection and check how the node answered it."""
    if framing == "exact":
        data = wire.prefix(payload)
    elif framing == "long":  # a frame that never completes: the node must just wait
        data = struct.pack("<I", len(payload) + 100) + payload
    else:
        data = payload  # raw: the first bytes are taken as a length
    with wire.connect(node.proc.socket_path) as sock:
        try:
            sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused early: fine
        else:
            if framing == "exact" and len(payload) <= MAX_FRAME:
                valid = verify_frame(payload)
                kind, detail = wire.outcome(sock, timeout_s=5.0 if not valid else 0.05)
                hypothesis.event(f"verified={valid} outcome={kind}")
                if not valid:
                    assert kind in ("error", "closed"), (kind, detail)
                if kind == "error" and not valid:
                    assert wire.closes(sock, timeout_s=5.0), (
                        "an invalid frame must close the connection"
                    )
    node.check(data)


@FUZZ
@given(data=st.data())
def test_random_bytes(fuzz_node: _Node, wire: Any, data: Any) -> None:
    payload = data.draw(st.binary(max_size=600), label="payload")
    framing = data.draw(st.sampled_from(["exact", "raw", "long"]), label="framing")
    _send_and_judge(fuzz_node, wire, payload, framing)


@FUZZ
@given(data=st.data())
def test_structured_frames(fuzz_node: _Node, wire: Any, data: Any) -> None:
    payload = data.draw(_structured(wire), label="payload")
    with wire.connect(fuzz_node.proc.socket_path) as sock:
        sock.sendall(wire.prefix(payload))
        hypothesis.event(f"ended {_replies(wire, sock, timeout_s=0.03)}")
    fuzz_node.check(payload)


@FUZZ
@given(data=st.data())
def test_mutated_frames(fuzz_node: _Node, wire: Any, data: Any) -> None:
    payload = data.draw(_mutated(wire), label="payload")
    framing = data.draw(
        st.sampled_from(["exact", "exact", "exact", "raw", "long"]), label="framing"
    )
    _send_and_judge(fuzz_node, wire, payload, framing)


def test_node_serves_after_fuzzing(fuzz_node: _Node) -> None:
    fuzz_node.check(b"", full=True)


def test_verify_frame_accepts_valid_frames(wire: Any) -> None:
    for payload in _valid_payloads(wire):
        assert verify_frame(payload) is True
    for payload in (b"", b"\0" * 3, b"\0" * 8, b"\xff" * 64):
        assert verify_frame(payload) is False


@settings(max_examples=2 * EXAMPLES, deadline=None, database=None)
@given(data=st.data())
def test_verify_frame_never_crashes(wire: Any, data: Any) -> None:
    payload = data.draw(
        st.one_of(st.binary(max_size=1024), _mutated(wire), _structured(wire)), label="payload"
    )
    assert verify_frame(payload) in (True, False)
    assert verify_frame(bytearray(payload)) == verify_frame(memoryview(payload))
