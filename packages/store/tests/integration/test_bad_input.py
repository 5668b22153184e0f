"""Misbehaving clients: after each one, the node must keep serving everybody else.

The node runs in a child process (``node_proc``), so a crash fails the test with the node's
last log lines instead of killing the test run.
"""

from __future__ import annotations

import os
import random
import socketserver
import struct
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from rayfield.store import (
    PROTOCOL_VERSION,
    ObjectAlreadySealedError,
    ProtocolMismatchError,
    StoreClient,
    StoreError,
)
from rayfield.store.protocol.fb import Body, ErrorCode

MAX_FRAME = 1 << 20  # the node_proc fixture's max_frame_bytes


def assert_serves(node: Any) -> None:
    """The node is alive and a fresh client can put and get."""
    assert node.alive(), f"the node died:\n{node.log()[-4000:]}"
    with StoreClient(node.socket_path, timeout_s=5.0) as client:
        oid, data = os.urandom(20), os.urandom(4096)
        client.put(oid, data, metadata=b"ok")
        [buf] = client.get([oid], timeout_s=5.0)
        assert bytes(buf) == data and buf.metadata == b"ok"
        buf.release()
        assert client.delete([oid]) == [True]


def assert_refused(wire: Any, sock: Any, code: int, closes: bool = True) -> None:
    """The node answered with an ErrorReply of ``code`` or closed, then (``closes``) closed."""
    kind, detail = wire.outcome(sock)
    assert kind == "closed" or (kind == "error" and detail[0] == code), (kind, detail)
    if closes:
        assert wire.closes(sock), "the node kept the connection open"


def _hello_payload(wire: Any) -> bytes:
    return wire.payload(wire.hello(PROTOCOL_VERSION))


def test_truncated_frame_then_disconnect(node_proc: Any, wire: Any) -> None:
    frame = wire.frame(wire.hello(PROTOCOL_VERSION))
    for cut in (2, 4, 9, len(frame) - 1):  # inside the prefix, after it, one byte short
        with wire.connect(node_proc.socket_path) as sock:
            sock.sendall(frame[:cut])
    with wire.connect(node_proc.socket_path) as sock:  # after a good Hello, half a request
        sock.sendall(frame)
        assert wire.outcome(sock)[0] == "reply"
        sock.sendall(wire.frame(wire.put(os.urandom(20), bytes(10_000)))[:5000])
    assert_serves(node_proc)


def test_oversized_length_prefix(node_proc: Any, wire: Any) -> None:
    for length in (MAX_FRAME + 1, 0xFFFFFFFF):
        with wire.connect(node_proc.socket_path) as sock:
            sock.sendall(struct.pack("<I", length) + b"\0" * 64)
            assert_refused(wire, sock, ErrorCode.ErrorCode.TooLarge)
    assert_serves(node_proc)


def test_random_garbage(node_proc: Any, wire: Any) -> None:
    rng = random.Random(1234)
    for _ in range(10):
        garbage = rng.randbytes(rng.randrange(1, 4096))
        with wire.connect(node_proc.socket_path) as sock:  # raw: a random length prefix
            sock.sendall(garbage)
            claimed = struct.unpack("<I", garbage[:4].ljust(4, b"\0"))[0]
            if len(garbage) >= 4 and (claimed > MAX_FRAME or claimed <= len(garbage) - 4):
                assert wire.outcome(sock)[0] in ("error", "closed")
        with wire.connect(node_proc.socket_path) as sock:  # a well-framed garbage payload
            sock.sendall(wire.prefix(garbage))
            assert_refused(wire, sock, ErrorCode.ErrorCode.InvalidRequest)
    assert_serves(node_proc)


@pytest.mark.parametrize(
    "corrupt",
    [
        lambda p: struct.pack("<I", 0xFFFFFFF0) + p[4:],  # root offset out of bounds
        lambda p: p[: len(p) // 2],  # truncated buffer (consistent prefix)
        lambda p: bytes(len(p)),  # all zeros
        lambda p: b"\x01\x02\x03",  # shorter than any flatbuffer
        lambda p: p[:4] + b"\xff" * (len(p) - 4),  # every offset and length huge
    ],
    ids=["root-offset", "truncated", "zeros", "tiny", "ff"],
)
def test_malformed_flatbuffer(node_proc: Any, wire: Any, corrupt: Any) -> None:
    with wire.connect(node_proc.socket_path) as sock:
        sock.sendall(wire.prefix(corrupt(_hello_payload(wire))))
        assert_refused(wire, sock, ErrorCode.ErrorCode.InvalidRequest)
    assert_serves(node_proc)


def test_wrong_protocol_version(node_proc: Any, wire: Any) -> None:
    theirs = PROTOCOL_VERSION + 41
    with wire.connect(node_proc.socket_path) as sock:
        sock.sendall(wire.frame(wire.hello(theirs)))
        kind, detail = wire.outcome(sock)
        assert kind == "error" and detail[0] == ErrorCode.ErrorCode.ProtocolMismatch
        assert str(theirs) in detail[1] and str(PROTOCOL_VERSION) in detail[1], detail[1]
        assert wire.closes(sock)
    assert_serves(node_proc)


def test_request_before_hello(node_proc: Any, wire: Any) -> None:
    for body in (wire.empty(Body.Body.StatsRequest), wire.put(os.urandom(20), b"sneaky")):
        with wire.connect(node_proc.socket_path) as sock:
            sock.sendall(wire.frame(body))
            assert_refused(wire, sock, ErrorCode.ErrorCode.InvalidRequest)
    assert_serves(node_proc)


def test_hello_twice(node_proc: Any, wire: Any) -> None:
    with wire.connect(node_proc.socket_path) as sock:
        sock.sendall(wire.frame(wire.hello(PROTOCOL_VERSION)))
        assert wire.outcome(sock) == ("reply", Body.Body.HelloReply)
        sock.sendall(wire.frame(wire.hello(PROTOCOL_VERSION), seq=2))
        assert_refused(wire, sock, ErrorCode.ErrorCode.InvalidRequest, closes=False)
    assert_serves(node_proc)


def test_subscriber_that_never_reads(node_proc: Any, wire: Any) -> None:
    with wire.connect(node_proc.socket_path) as sock:
        sock.sendall(wire.frame(wire.hello(PROTOCOL_VERSION)))
        assert wire.outcome(sock) == ("reply", Body.Body.HelloReply)
        sock.sendall(wire.frame(wire.empty(Body.Body.SubscribeRequest), seq=2))
        done = threading.Event()
        errors: list[BaseException] = []

        def churn() -> None:  # two notifications per object, never read by `sock`
            try:
                with StoreClient(node_proc.socket_path) as client:
                    for _ in range(3000):
                        oid = os.urandom(20)
                        client.put(oid, bytes(1024))
                        client.delete([oid])
            except BaseException as exc:
                errors.append(exc)
            finally:
                done.set()

        thread = threading.Thread(target=churn)
        thread.start()
        try:
            finished = done.wait(timeout=60)
        finally:
            sock.close()  # unblocks a node that (wrongly) blocks on this client
            thread.join(timeout=30)
        assert finished, "the node stalled while one subscriber did not read"
        assert not errors, errors
    assert_serves(node_proc)


def test_double_seal_and_release_of_unknown_id(node_proc: Any) -> None:
    with StoreClient(node_proc.socket_path) as client:
        oid = os.urandom(20)
        client.put(oid, b"once")
        with pytest.raises(ObjectAlreadySealedError):
            client.seal(oid)
        try:
            client.release(os.urandom(20))
        except StoreError:
            pass  # an error is allowed; breaking the connection or the node is not
        client.release(oid)  # a reference this client does not hold
        [buf] = client.get([oid], timeout_s=5.0)
        assert bytes(buf) == b"once"
        buf.release()
        client.put(os.urandom(20), b"the same client still works")
    assert_serves(node_proc)


# ---- a fake node that speaks another protocol version -----------------------------------


class _FakeNode(socketserver.UnixStreamServer):
    """Answers every Hello with ``self.answer(wire, hello_seq)`` and waits for the hangup."""

    def __init__(self, path: str, wire: Any, answer: Any) -> None:
        self.wire, self.answer = wire, answer
        super().__init__(path, _FakeNodeHandler)


class _FakeNodeHandler(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        wire = self.server.wire
        self.request.settimeout(10)
        payload = wire.read_frame(self.request)
        if payload is not None:
            seq, body_type, _ = wire.messages(payload)[0]
            assert body_type == Body.Body.Hello
            self.request.sendall(self.server.answer(wire, seq))
            while wire.read_frame(self.request) is not None:
                pass


@pytest.fixture
def fake_node(tmp_path: Any, wire: Any) -> Iterator[Any]:
    """``start(answer)`` serves a fake node; returns its socket path."""
    servers: list[tuple[_FakeNode, threading.Thread]] = []

    def start(answer: Any) -> str:
        path = os.path.join(str(tmp_path), f"fake{len(servers)}.sock")
        if len(path) > 100:
            path = os.path.join("/tmp", f"rf-fake-{os.getpid()}-{len(servers)}.sock")
        server = _FakeNode(path, wire, answer)
        thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
        thread.start()
        servers.append((server, thread))
        return path

    try:
        yield start
    finally:
        for server, thread in servers:
            server.shutdown()
            server.server_close()
            thread.join(timeout=10)
            os.unlink(server.server_address)


def _hello_reply(version: int) -> Any:
    import flatbuffers

    from rayfield.store.protocol.fb import HelloReply, UniqueID

    def answer(wire: Any, seq: int) -> bytes:
        def build(b: flatbuffers.Builder) -> int:
            HelloReply.Start(b)
            HelloReply.AddProtocolVersion(b, version)
            HelloReply.AddNodeId(b, UniqueID.CreateUniqueId(b, bytes(20)))
            HelloReply.AddArenaSize(b, 1 << 20)
            HelloReply.AddClientId(b, 1)
            return HelloReply.End(b)

        return wire.frame((Body.Body.HelloReply, build), seq=seq)

    return answer


def _protocol_error(client_version: int, node_version: int) -> Any:
    import flatbuffers

    from rayfield.store.protocol.fb import ErrorReply

    def answer(wire: Any, seq: int) -> bytes:
        def build(b: flatbuffers.Builder) -> int:
            message = b.CreateString(
                f"protocol version mismatch: client speaks {client_version}, "
                f"node speaks {node_version}"
            )
            ErrorReply.Start(b)
            ErrorReply.AddCode(b, ErrorCode.ErrorCode.ProtocolMismatch)
            ErrorReply.AddMessage(b, message)
            ErrorReply.AddRequestedBytes(b, client_version)
            ErrorReply.AddCapacityBytes(b, node_version)
            return ErrorReply.End(b)

        return wire.frame((Body.Body.ErrorReply, build), seq=seq)

    return answer


def test_client_refuses_a_node_of_another_version(fake_node: Any) -> None:
    theirs = PROTOCOL_VERSION + 7
    path = fake_node(_hello_reply(theirs))
    with pytest.raises(ProtocolMismatchError) as info:
        StoreClient(path, timeout_s=5.0)
    message = str(info.value)
    assert str(theirs) in message and str(PROTOCOL_VERSION) in message, message
    assert (info.value.client_version, info.value.node_version) == (PROTOCOL_VERSION, theirs)


def test_client_reports_the_nodes_protocol_error(fake_node: Any) -> None:
    theirs = PROTOCOL_VERSION + 3
    path = fake_node(_protocol_error(PROTOCOL_VERSION, theirs))
    with pytest.raises(ProtocolMismatchError) as info:
        StoreClient(path, timeout_s=5.0)
    assert str(theirs) in str(info.value)
    assert (info.value.client_version, info.value.node_version) == (PROTOCOL_VERSION, theirs)
