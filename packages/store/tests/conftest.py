"""Shared fixtures of the store's tests: leak checks, nodes, and raw protocol frames."""

from __future__ import annotations

import array
import contextlib
import gc
import os
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import flatbuffers
import pytest

from rayfield.store.protocol.fb import (
    Body,
    ContainsRequest,
    CreateRequest,
    DeleteRequest,
    ErrorReply,
    Frame,
    GetRequest,
    Hello,
    Message,
    PutRequest,
    ReleaseRequest,
    SealRequest,
    UniqueID,
)
from rayfield.store.testing import local_node, node_process

with contextlib.suppress(ImportError):  # libraries whose import starts threads: baseline
    import numpy  # noqa: F401
import rayfield.store._native  # noqa: F401  (a store without its extension is broken)

# ---- leaks -------------------------------------------------------------------------------


def _resources() -> dict[str, set[str]]:
    fds = set()
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/self/fd/{fd}")
            if target.startswith("socket:") or "memfd:" in target or "/dev/shm/" in target:
                fds.add(f"fd {fd} -> {target}")
    children = set()
    for task in os.listdir("/proc/self/task"):
        with contextlib.suppress(OSError), open(f"/proc/self/task/{task}/children") as f:
            children.update(f"child process {pid}" for pid in f.read().split())
    return {
        "threads": {f"thread {t.name}" for t in threading.enumerate()},
        "os_threads": {f"OS thread {t}" for t in os.listdir("/proc/self/task")},
        "fds": fds,
        "children": children,
    }


@pytest.fixture(autouse=True)
def no_leaks() -> Iterator[None]:
    """Fail a test that leaves a thread, child process, socket or shared memory fd behind."""
    before = _resources()
    yield
    deadline = time.monotonic() + 5.0
    while True:
        gc.collect()
        after = _resources()
        leaked = sorted(x for key in after for x in after[key] - before[key])
        if not leaked or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert not leaked, f"the test left behind: {leaked}"


# ---- nodes -------------------------------------------------------------------------------


@pytest.fixture
def node(tmp_path: Any) -> Iterator[Any]:
    """A native node in this process with a 64 MiB store."""
    with local_node(tmp_path, 64 << 20) as server:
        yield server


@pytest.fixture
def node_proc(tmp_path: Any) -> Iterator[Any]:
    """A native node in a child process (64 MiB store, 1 MiB frames), for crash isolation."""
    with node_process(tmp_path, 64 << 20, max_frame_bytes=1 << 20) as proc:
        yield proc


# ---- raw frames --------------------------------------------------------------------------


def _ids(builder: flatbuffers.Builder, start: Callable[..., int], ids: list[bytes]) -> int:
    start(builder, len(ids))
    for oid in reversed(ids):
        UniqueID.CreateUniqueId(builder, oid)
    return builder.EndVector()


def _bytes(builder: flatbuffers.Builder, data: bytes) -> int:
    return builder.CreateByteVector(data)


class Wire:
    """Builds request frames and reads reply frames of the node protocol, byte by byte.

    A body is ``(Body.<Type>, build)`` where ``build(builder)`` returns the table's offset;
    the helpers below make the usual ones.
    """

    @staticmethod
    def frame(*bodies: tuple[int, Callable[[flatbuffers.Builder], int]], seq: int = 1) -> bytes:
        """The length prefix and the ``Frame`` flatbuffer holding ``bodies`` as messages."""
        return Wire.prefix(Wire.payload(*bodies, seq=seq))

    @staticmethod
    def prefix(payload: bytes) -> bytes:
        return struct.pack("<I", len(payload)) + payload

    @staticmethod
    def payload(*bodies: tuple[int, Callable[[flatbuffers.Builder], int]], seq: int = 1) -> bytes:
        """The ``Frame`` flatbuffer alone (no length prefix)."""
        b = flatbuffers.Builder(256)
        messages = []
        for i, (body_type, build) in enumerate(bodies):
            body = build(b)
            Message.Start(b)
            Message.AddSeq(b, (seq + i) % 2**64)
            Message.AddBodyType(b, body_type)
            Message.AddBody(b, body)
            messages.append(Message.End(b))
        Frame.StartMessagesVector(b, len(messages))
        for offset in reversed(messages):
            b.PrependUOffsetTRelative(offset)
        vector = b.EndVector()
        Frame.Start(b)
        Frame.AddMessages(b, vector)
        b.Finish(Frame.End(b))
        return bytes(b.Output())

    @staticmethod
    def hello(version: int, kind: int = 0, name: str = "raw") -> tuple[int, Callable]:
        def build(b: flatbuffers.Builder) -> int:
            name_offset = b.CreateString(name)
            Hello.Start(b)
            Hello.AddProtocolVersion(b, version)
            Hello.AddKind(b, kind)
            Hello.AddPid(b, os.getpid())
            Hello.AddName(b, name_offset)
            return Hello.End(b)

        return Body.Body.Hello, build

    @staticmethod
    def empty(body_type: int) -> tuple[int, Callable]:
        """A body without fields (Stats, Subscribe, List, Ok), or any table left empty."""

        def build(b: flatbuffers.Builder) -> int:
            b.StartObject(0)
            return b.EndObject()

        return body_type, build

    @staticmethod
    def create(oid: bytes, data_size: int, metadata_size: int = 0) -> tuple[int, Callable]:
        def build(b: flatbuffers.Builder) -> int:
            CreateRequest.Start(b)
            CreateRequest.AddObjectId(b, UniqueID.CreateUniqueId(b, oid))
            CreateRequest.AddDataSize(b, data_size)
            CreateRequest.AddMetadataSize(b, metadata_size)
            return CreateRequest.End(b)

        return Body.Body.CreateRequest, build

    @staticmethod
    def put(oid: bytes, data: bytes, metadata: bytes = b"") -> tuple[int, Callable]:
        def build(b: flatbuffers.Builder) -> int:
            data_offset, meta_offset = _bytes(b, data), _bytes(b, metadata)
            PutRequest.Start(b)
            PutRequest.AddObjectId(b, UniqueID.CreateUniqueId(b, oid))
            PutRequest.AddData(b, data_offset)
            PutRequest.AddMetadata(b, meta_offset)
            return PutRequest.End(b)

        return Body.Body.PutRequest, build

    @staticmethod
    def seal(oid: bytes) -> tuple[int, Callable]:
        def build(b: flatbuffers.Builder) -> int:
            SealRequest.Start(b)
            SealRequest.AddObjectId(b, UniqueID.CreateUniqueId(b, oid))
            return SealRequest.End(b)

        return Body.Body.SealRequest, build

    @staticmethod
    def get(ids: list[bytes], timeout_ms: int = 0) -> tuple[int, Callable]:
        def build(b: flatbuffers.Builder) -> int:
            vector = _ids(b, GetRequest.StartObjectIdsVector, ids)
            GetRequest.Start(b)
            GetRequest.AddObjectIds(b, vector)
            GetRequest.AddTimeoutMs(b, timeout_ms)
            return GetRequest.End(b)

        return Body.Body.GetRequest, build

    @staticmethod
    def ids_request(body_type: int, ids: list[bytes]) -> tuple[int, Callable]:
        """Release, Contains or Delete of ``ids``."""
        module = {
            Body.Body.ReleaseRequest: ReleaseRequest,
            Body.Body.ContainsRequest: ContainsRequest,
            Body.Body.DeleteRequest: DeleteRequest,
        }[body_type]

        def build(b: flatbuffers.Builder) -> int:
            vector = _ids(b, module.StartObjectIdsVector, ids)
            module.Start(b)
            module.AddObjectIds(b, vector)
            return module.End(b)

        return body_type, build

    # ---- reading ----

    @staticmethod
    def connect(socket_path: str, timeout_s: float = 5.0) -> socket.socket:
        """A raw Unix socket to the node."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout_s)
        sock.connect(socket_path)
        return sock

    @staticmethod
    def _recv_exact(sock: socket.socket, n: int) -> bytes | None:
        buf = bytearray()
        while len(buf) < n:
            try:
                data, ancdata, _, _ = sock.recvmsg(n - len(buf), socket.CMSG_SPACE(16))
            except (ConnectionResetError, BrokenPipeError):
                return None
            for level, kind, cdata in ancdata:  # the arena's fd, passed after HelloReply
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    for fd in array.array("i", cdata[: len(cdata) - len(cdata) % 4]):
                        os.close(fd)
            if not data:
                return None
            buf += data
        return bytes(buf)

    @staticmethod
    def read_frame(sock: socket.socket) -> bytes | None:
        """The next frame's flatbuffer; ``None`` once the node closed the connection.

        Raises:
            TimeoutError: nothing arrived within the socket's timeout.
        """
        header = Wire._recv_exact(sock, 4)
        if header is None:
            return None
        return Wire._recv_exact(sock, struct.unpack("<I", header)[0])

    @staticmethod
    def messages(payload: bytes) -> list[tuple[int, int, Any]]:
        """``(seq, body_type, body_table)`` of every message of a frame."""
        frame = Frame.Frame.GetRootAs(payload, 0)
        out = []
        for i in range(frame.MessagesLength()):
            message = frame.Messages(i)
            out.append((message.Seq(), message.BodyType(), message.Body()))
        return out

    @staticmethod
    def error(table: Any) -> tuple[int, str]:
        """``(code, message)`` of an ErrorReply body."""
        reply = ErrorReply.ErrorReply()
        reply.Init(table.Bytes, table.Pos)
        return reply.Code(), (reply.Message() or b"").decode(errors="replace")

    @staticmethod
    def outcome(sock: socket.socket, timeout_s: float = 5.0) -> tuple[str, Any]:
        """How the node answered: ``("error", (code, message))``, ``("closed", None)``,
        ``("reply", body_type)`` for another first message, or ``("silent", None)``."""
        sock.settimeout(timeout_s)
        try:
            payload = Wire.read_frame(sock)
        except TimeoutError:
            return "silent", None
        if payload is None:
            return "closed", None
        _, body_type, table = Wire.messages(payload)[0]
        if body_type == Body.Body.ErrorReply:
            return "error", Wire.error(table)
        return "reply", body_type

    @staticmethod
    def closes(sock: socket.socket, timeout_s: float = 5.0) -> bool:
        """Whether the node closes the connection within ``timeout_s`` (frames are skipped)."""
        deadline = time.monotonic() + timeout_s
        while (left := deadline - time.monotonic()) > 0:
            sock.settimeout(left)
            try:
                if Wire.read_frame(sock) is None:
                    return True
            except TimeoutError:
                return False
        return False


@pytest.fixture(scope="session")
def wire() -> type[Wire]:
    """The :class:`Wire` helpers."""
    return Wire
