"""The data channel with real stores and sockets in one process: two or three stores, a
``DataServer`` on each holder, a ``DataClient`` pulling into the receiver's store."""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rayfield._private.node_manager import data_channel as dc
from rayfield._private.node_manager.data_pull import ChannelUnavailable, DataClient
from rayfield._private.transport import TlsConfig
from rayfield.store import NodeServer, StoreClient
from rayfield.testing import wait_for

TOKEN = "t0ken" * 8
MB = 1 << 20


class Node:
    """A store, a client of it, and (started by ``serve``) its data server."""

    def __init__(self, tmp: Path, name: str) -> None:
        self.server = NodeServer(str(tmp / f"{name}.sock"), 64 * MB, prefault=False).start()
        self.client = StoreClient(self.server.socket_path)
        self.data: dc.DataServer | None = None

    def serve(self, tls: TlsConfig | None = None, token: str = TOKEN) -> str:
        self.data = dc.DataServer(self.server.socket_path, token, "127.0.0.1", tls)
        return f"127.0.0.1:{self.data.port}"  # used as the "service address" below

    def close(self) -> None:
        if self.data is not None:
            self.data.close()
        self.client.close()
        self.server.stop()


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[list[Node]]:
    made = [Node(tmp_path, f"n{i}") for i in range(3)]
    yield made
    for node in made:
        node.close()


def same_port(address: str) -> int:
    """``port_of`` for these tests: the address given is the data server's itself."""
    return int(address.rsplit(":", 1)[1])


def put(node: Node, size: int, meta: bytes = b"M") -> tuple[bytes, bytes]:
    oid, data = os.urandom(20), os.urandom(size)
    node.client.put(oid, data, metadata=meta)
    return oid, data


def read(node: Node, oid: bytes) -> tuple[bytes, bytes]:
    [buf] = node.client.get([oid], timeout_s=0)
    assert buf is not None
    try:
        return bytes(memoryview(buf)), bytes(buf.metadata)
    finally:
        buf.release()


@pytest.fixture
def make_client() -> Iterator[Callable[..., DataClient]]:
    made: list[DataClient] = []

    def make(tls: TlsConfig | None = None, token: str = TOKEN, **kw: int) -> DataClient:
        made.append(DataClient(token, tls, same_port, **kw))
        return made[-1]

    yield make
    for c in made:
        c.close()


def test_an_object_comes_in_chunks_on_several_streams(
    nodes: list[Node], make_client: Callable[..., DataClient]
) -> None:
    holder, receiver, _ = nodes
    address = holder.serve()
    oid, data = put(holder, 5 * MB + 123, b"meta")
    c = make_client(chunk_bytes=MB, streams=3)
    assert c.pull(receiver.client, oid, [address], 100) == (True, address, len(data))
    assert read(receiver, oid) == (data, b"meta")
    assert holder.data is not None and holder.data.bytes_sent == len(data)
    # A second pull finds it here; one of an object nobody has says so.
    assert c.pull(receiver.client, oid, [address], 0)[0] is None
    assert c.pull(receiver.client, os.urandom(20), [address], 0) == (False, "", 0)
    empty, _ = put(holder, 0)
    assert c.pull(receiver.client, empty, [address], 0) == (True, address, 0)
    assert read(receiver, empty) == (b"", b"M")


def test_kept_connections_the_server_dropped_are_replaced(
    nodes: list[Node], make_client: Callable[..., DataClient]
) -> None:
    holder, receiver, _ = nodes
    address = holder.serve()
    c = make_client(chunk_bytes=MB, streams=2)
    for _ in range(2):  # each pull after the server dropped the connections it kept
        oid, data = put(holder, 3 * MB)
        assert c.pull(receiver.client, oid, [address], 0) == (True, address, len(data))
        assert read(receiver, oid)[0] == data
        assert holder.data is not None
        assert holder.data.drop_connections() >= 1
        wait_for(lambda: holder.data.connections() == 0, 10, "the dropped connections closed")


def test_chunks_come_from_every_holder_and_a_source_without_it_is_skipped(
    nodes: list[Node], make_client: Callable[..., DataClient]
) -> None:
    a, b, receiver = nodes
    addr_a, addr_b = a.serve(), b.serve()
    oid, data = put(a, 4 * MB)
    b.client.put(oid, data, metadata=b"M")
    c = make_client(chunk_bytes=MB // 2, streams=2)
    assert c.pull(receiver.client, oid, [addr_a, addr_b], 0)[0] is True
    assert read(receiver, oid) == (data, b"M")
    assert a.data is not None and b.data is not None
    assert a.data.bytes_sent > 0 and b.data.bytes_sent > 0
    assert a.data.bytes_sent + b.data.bytes_sent == len(data)
    # b lacks the next object: its chunks fail over to a.
    other, data2 = put(a, 3 * MB)
    assert c.pull(receiver.client, other, [addr_a, addr_b], 0)[0] is True
    assert read(receiver, other)[0] == data2


class FlakyServer:
    """Speaks the channel for one object: the hello, then ``good_requests`` answers;
    the next request is answered with a header and only half its data, then the
    connection is closed."""

    def __init__(self, data: bytes, good_requests: int) -> None:
        self.data, self.good = data, good_requests
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except OSError:
                return
            with sock:
                try:
                    self._serve(sock)
                except OSError:
                    pass

    def _serve(self, sock: socket.socket) -> None:
        _, _, n = dc.HELLO.unpack(dc.recv_exact(sock, dc.HELLO.size))
        dc.recv_exact(sock, n)
        sock.sendall(b"OK")
        while True:
            _, _, offset, length, _ = dc.REQUEST.unpack(dc.recv_exact(sock, dc.REQUEST.size))
            part = self.data[offset : offset + length]
            sock.sendall(dc.REPLY.pack(b"RP", dc.OK, len(self.data), 1) + b"M")
            if self.good <= 0:
                sock.sendall(part[: len(part) // 2])
                return
            self.good -= 1
            sock.sendall(part)

    def close(self) -> None:
        self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()


def test_a_source_dying_midway_aborts_the_object_and_nothing_leaks(
    nodes: list[Node], make_client: Callable[..., DataClient]
) -> None:
    receiver = nodes[0]
    data = os.urandom(3 * MB)
    oid = os.urandom(20)
    flaky = FlakyServer(data, good_requests=1)
    try:
        c = make_client(chunk_bytes=MB, streams=1)
        assert c.pull(receiver.client, oid, [flaky.address], 0) == (False, flaky.address, len(data))
        assert not receiver.client.contains(oid)
        assert receiver.client.stats()["used_bytes"] == 0  # the partial buffer was aborted
    finally:
        flaky.close()


def test_a_chunk_a_source_fails_comes_from_another_holder(
    nodes: list[Node], make_client: Callable[..., DataClient]
) -> None:
    holder, receiver, _ = nodes
    oid, data = put(holder, 4 * MB)
    flaky = FlakyServer(data, good_requests=1)  # answers the first chunk, then breaks
    try:
        c = make_client(chunk_bytes=MB, streams=2)
        stored, source, _ = c.pull(receiver.client, oid, [flaky.address, holder.serve()], 0)
        assert (stored, source) == (True, flaky.address)
        assert read(receiver, oid)[0] == data
    finally:
        flaky.close()


def closed(sock: socket.socket) -> bool:
    """Whether the peer closed ``sock`` (a reset counts: it closed with bytes unread)."""
    try:
        return sock.recv(10) == b""
    except ConnectionResetError:
        return True


def test_wrong_token_and_malformed_input_close_the_connection_not_the_server(
    nodes: list[Node],
    make_client: Callable[..., DataClient],
    caplog: pytest.LogCaptureFixture,
) -> None:
    holder, receiver, _ = nodes
    address = holder.serve()
    oid, data = put(holder, MB)
    caplog.set_level(logging.INFO, logger="rayfield")
    with pytest.raises(ChannelUnavailable, match="refused"):
        make_client(token="wrong").pull(receiver.client, oid, [address], 0)
    assert "wrong cluster token" in caplog.text
    host, port = "127.0.0.1", same_port(address)
    for garbage in (b"GET / HTTP/1.1\r\n\r\n", dc.HELLO.pack(dc.MAGIC, dc.VERSION, 60000)):
        with socket.create_connection((host, port)) as sock:
            sock.sendall(garbage)
            assert closed(sock)  # without an answer
    hello = dc.HELLO.pack(dc.MAGIC, dc.VERSION, len(TOKEN)) + TOKEN.encode()
    with socket.create_connection((host, port)) as sock:
        sock.sendall(hello)
        assert dc.recv_exact(sock, 2) == b"OK"
        sock.sendall(b"XX" + bytes(dc.REQUEST.size - 2))
        assert closed(sock)
    assert "malformed request header" in caplog.text
    with socket.create_connection((host, port)) as sock:  # a request beyond the end
        sock.sendall(hello)
        dc.recv_exact(sock, 2)
        sock.sendall(dc.REQUEST.pack(b"RQ", oid, 2 * MB, 10, 0))
        tag, status, size, meta_len = dc.REPLY.unpack(dc.recv_exact(sock, dc.REPLY.size))
        assert (tag, status, size, meta_len) == (b"RP", dc.BAD_RANGE, MB, 0)
    with socket.create_connection((host, port)) as sock:  # hung up mid-header
        sock.sendall(hello[:3])
    # The server still serves a well-behaved client.
    assert make_client().pull(receiver.client, oid, [address], 0)[0] is True
    assert read(receiver, oid)[0] == data
    assert holder.data is not None
    wait_for(lambda: holder.data.connections() <= 1, 10, "the bad connections closed")


def test_no_channel_raises_channel_unavailable(
    nodes: list[Node], make_client: Callable[..., DataClient]
) -> None:
    receiver = nodes[0]
    with pytest.raises(ChannelUnavailable, match="no data channel"):
        DataClient(TOKEN, None, lambda a: 0).pull(receiver.client, os.urandom(20), ["h:1"], 0)
    free = socket.create_server(("127.0.0.1", 0))
    dead = f"127.0.0.1:{free.getsockname()[1]}"
    free.close()  # nothing listens there now
    with pytest.raises(ChannelUnavailable, match="cannot connect"):
        make_client().pull(receiver.client, os.urandom(20), [dead], 0)


def test_tls_channel_carries_objects_and_refuses_plaintext(
    nodes: list[Node], make_client: Callable[..., DataClient], tmp_path: Path
) -> None:
    from rayfield._private.driver.certs import make_test_certificates

    certs = make_test_certificates(tmp_path)
    tls = TlsConfig(str(certs["server.crt"]), str(certs["server.key"]), str(certs["ca.crt"]))
    rogue = TlsConfig(
        str(certs["rogue-server.crt"]), str(certs["rogue-server.key"]), str(certs["rogue-ca.crt"])
    )
    holder, receiver, _ = nodes
    address = holder.serve(tls)
    oid, data = put(holder, 3 * MB)
    assert make_client(tls, chunk_bytes=MB).pull(receiver.client, oid, [address], 0)[0] is True
    assert read(receiver, oid)[0] == data
    other, _ = put(holder, MB)
    for wrong in (None, rogue):
        with pytest.raises(ChannelUnavailable):
            make_client(wrong).pull(receiver.client, other, [address], 0)


def test_a_port_that_cannot_be_reached_is_asked_for_again(nodes: list[Node]) -> None:
    holder, receiver = nodes[0], nodes[1]
    address = holder.serve()
    free = socket.create_server(("127.0.0.1", 0))
    dead_port = free.getsockname()[1]
    free.close()
    answers = [dead_port, same_port(address)]  # the node moved (restarted) meanwhile
    c = DataClient(TOKEN, None, lambda a: answers.pop(0))
    try:
        oid, data = put(holder, MB)
        with pytest.raises(ChannelUnavailable, match="cannot connect"):
            c.pull(receiver.client, oid, [address], 0)
        assert c.pull(receiver.client, oid, [address], 0)[0] is True
        assert read(receiver, oid)[0] == data and answers == []
    finally:
        c.close()
