"""The wire of direct actor calls: a caller's calls straight to the actor's worker.

A worker that hosts a sequential actor in a cluster (``direct_server.py``) listens on a
TCP port of its node's address and publishes a record of it in its node's store under
:func:`record_id`: the port, a 32-byte secret made for this actor's process, and the
process id. A caller reads the record from the actor's node (``FetchObjects``, behind the
cluster token), so only holders of the token learn the secret.

Wire format (big-endian):

* Hello, caller to worker, once per connection: ``b"RFAC"``, version (u8), the secret
  (32 bytes). The worker answers ``b"OK"`` or closes the connection.
* Call: length (u32), then a pickle of ``(task_id, return_ids, name, data, metadata,
  options)``: the method's name, its serialized ``(args, kwargs)`` (no ObjectRef or actor
  handle in them) and the call's options (``job``, ``serializers``, ``submitted``).
* Reply, worker to caller, one per call in the order the calls came: length (u32), then a
  pickle of one ``(data, metadata, actor_ids)`` per return id: the serialized result (or
  the error the call raised) and the actors whose handles it holds.

A connection carries any number of calls; the worker runs them one after the other.
Anything malformed closes the connection (with a log line on the worker); the process
carries on.
"""

from __future__ import annotations

import pickle
import socket
import struct
from typing import Any

__all__ = [
    "HELLO",
    "LENGTH",
    "MAGIC",
    "MAX_CALL_BYTES",
    "RECORD",
    "RECORD_INDEX",
    "SECRET_BYTES",
    "VERSION",
    "FrameReader",
    "Malformed",
    "decode_call",
    "decode_reply",
    "encode_call",
    "encode_reply",
    "record_id",
    "tune",
]

MAGIC = b"RFAC"
VERSION = 1
SECRET_BYTES = 32
HELLO = struct.Struct(f"!4sB{SECRET_BYTES}s")
RECORD = struct.Struct(f"!H{SECRET_BYTES}sI")  # port, secret, pid
LENGTH = struct.Struct("!I")
MAX_CALL_BYTES = 4 << 20  # a call's frame (its arguments are at most 100 KiB inline)
RECORD_INDEX = b"\xfe\xff\xff\xff"  # the index bytes of a record's id (no task has it)


class Malformed(ValueError):
    """A frame that does not follow the format."""


def record_id(node_id: bytes, actor_id: bytes) -> bytes:
    """The id of the record of ``actor_id``'s direct port in the store of its node
    ``node_id``: the node's origin, the actor's process prefix and counter, and an index no
    task or put uses."""
    return node_id[:6] + actor_id[6:16] + RECORD_INDEX


def tune(sock: socket.socket) -> None:
    """No Nagle delay (calls are small), and keepalive so a peer that vanished is noticed."""
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)


def encode_call(
    task_id: bytes,
    return_ids: list[bytes],
    name: str,
    data: bytes,
    metadata: bytes,
    options: dict[str, Any],
) -> bytes:
    """One call's frame."""
    body = pickle.dumps((task_id, return_ids, name, data, metadata, options), protocol=5)
    return LENGTH.pack(len(body)) + body


def decode_call(body: bytes) -> tuple[bytes, list[bytes], str, bytes, bytes, dict[str, Any]]:
    """A call frame's body as ``(task_id, return_ids, name, data, metadata, options)``.

    Raises:
        Malformed: it is not a call.
    """
    try:
        task_id, return_ids, name, data, meta, options = pickle.loads(body)
    except Exception as exc:
        raise Malformed(f"not a call: {type(exc).__name__}: {exc}") from None
    if not (
        isinstance(task_id, bytes)
        and isinstance(return_ids, list)
        and return_ids
        and all(isinstance(r, bytes) for r in return_ids)
        and isinstance(name, str)
        and isinstance(data, bytes)
        and isinstance(meta, bytes)
        and isinstance(options, dict)
    ):
        raise Malformed("not a call: wrong field types")
    return task_id, return_ids, name, data, meta, options


def encode_reply(entries: list[tuple[bytes, bytes, list[bytes]]]) -> bytes:
    """One reply's frame: ``(data, metadata, actor_ids)`` per return id."""
    body = pickle.dumps(entries, protocol=5)
    return LENGTH.pack(len(body)) + body


def decode_reply(body: bytes) -> list[tuple[bytes, bytes, list[bytes]]]:
    """A reply frame's body (from the worker the caller authenticated)."""
    entries = pickle.loads(body)
    if not isinstance(entries, list):
        raise Malformed("not a reply")
    return entries


class FrameReader:
    """Length-prefixed frames from a socket, as many as one ``recv`` brought at a time.

    Args:
        sock: the connected socket.
        max_bytes: the largest frame accepted (None: any).
    """

    def __init__(self, sock: socket.socket, max_bytes: int | None = None) -> None:
        self.sock = sock
        self.max_bytes = max_bytes
        self.buf = bytearray()

    def frames(self) -> list[bytes] | None:
        """The frames complete after one more ``recv`` (at least one); None when the peer
        closed the connection.

        Raises:
            Malformed: a frame is longer than ``max_bytes``.
            OSError: the socket failed.
        """
        out: list[bytes] = []
        while not out:
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                return None
            self.buf += chunk
            start, buf = 0, self.buf
            while len(buf) - start >= LENGTH.size:
                (n,) = LENGTH.unpack_from(buf, start)
                if self.max_bytes is not None and n > self.max_bytes:
                    raise Malformed(f"a frame of {n} bytes (at most {self.max_bytes})")
                if len(buf) - start - LENGTH.size < n:
                    break
                out.append(bytes(buf[start + LENGTH.size : start + LENGTH.size + n]))
                start += LENGTH.size + n
            del buf[:start]
        return out
