"""The data channel: object bytes between nodes over plain TCP, and the node's server of it.

gRPC copies every chunk of an object several times (into a flatbuffer, into gRPC's
slices, out of them into a Python bytes object) before it lands in the store; on the
channel the sender writes straight from the sealed object's shared memory with
``sendall`` and the receiver reads straight into the ``create``d buffer with
``recv_into``, so the only copies are the kernel's. The gRPC service stays for control
and is the fallback (``PullObject``) where a channel cannot be set up.

Wire format (big-endian; ``ID_SIZE`` is the store's id size, 20 bytes):

* Hello, client to server, once per connection: ``b"RFDC"``, version (u8), token length
  (u16), the cluster token (UTF-8). The server answers ``b"OK"`` or closes the connection
  (wrong magic, version or token). With TLS configured the connection is mutual TLS
  (the cluster's certificates, as for gRPC) before the hello.
* Request: ``b"RQ"``, object id, offset (u64), length (u64), wait (u32, ms): the bytes
  ``offset .. offset + length`` of the object, waiting up to ``wait`` for it to be sealed
  here.
* Reply: ``b"RP"``, status (u8), the object's size (u64), metadata length (u32), the
  metadata, then, for status ``OK``, ``min(length, size - offset)`` bytes of data.
  ``NOT_HERE``: this node does not have it (sealed) within the wait; ``BAD_RANGE``:
  ``offset`` is beyond the object.

A connection carries any number of requests, one after the other. Anything malformed
closes the connection with a log line; the node carries on.
"""

from __future__ import annotations

import hmac
import logging
import socket
import ssl
import struct
import threading
from typing import Any

from rayfield._private.common.socket_io import ChannelClosed, recv_exact, recv_into_exact
from rayfield._private.transport import TlsConfig
from rayfield.store import ID_SIZE, StoreClient

__all__ = [
    "BAD_RANGE",
    "HELLO",
    "MAGIC",
    "NOT_HERE",
    "OK",
    "REPLY",
    "REQUEST",
    "VERSION",
    "ChannelClosed",
    "DataServer",
    "client_context",
    "recv_exact",
    "recv_into_exact",
    "server_context",
    "tune",
]

logger = logging.getLogger("rayfield")

MAGIC = b"RFDC"
VERSION = 1
HELLO = struct.Struct("!4sBH")  # magic, version, token length; the token follows
REQUEST = struct.Struct(f"!2s{ID_SIZE}sQQI")  # b"RQ", object id, offset, length, wait ms
REPLY = struct.Struct("!2sBQI")  # b"RP", status, size, metadata length; metadata, data follow
OK, NOT_HERE, BAD_RANGE = 0, 1, 2
MAX_TOKEN_BYTES = 1024
MAX_WAIT_MS = 5000  # the longest a request waits for its object to be sealed
HELLO_TIMEOUT_S = 10.0  # a connection must say hello within this
IDLE_TIMEOUT_S = 120.0  # an idle connection is closed after this (the client reconnects)
MAX_CONNECTIONS = 256  # connections served at once; more are closed at once
SOCKET_BUFFER_BYTES = 4 << 20


def tune(sock: socket.socket) -> None:
    """Socket options of both ends: no Nagle delay (requests are small), big buffers."""
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for opt in (socket.SO_SNDBUF, socket.SO_RCVBUF):
        sock.setsockopt(socket.SOL_SOCKET, opt, SOCKET_BUFFER_BYTES)


def server_context(tls: TlsConfig) -> ssl.SSLContext:
    """Mutual TLS for the server end: client certificates signed by the cluster CA."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(tls.cert_path, tls.key_path)
    ctx.load_verify_locations(tls.ca_path)
    ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def client_context(tls: TlsConfig) -> ssl.SSLContext:
    """Mutual TLS for the client end: the server's certificate checked against the
    cluster CA and the host name, this node's certificate presented."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_cert_chain(tls.cert_path, tls.key_path)
    ctx.load_verify_locations(tls.ca_path)
    return ctx


class DataServer:
    """Serves the objects of the local store on the data channel (started).

    Args:
        socket_path: the local node's socket; the server opens its own store connection.
        token: the cluster token a client must present.
        host: the address to listen on (the node's service host).
        tls: mutual TLS (None: plaintext, like the node's gRPC service).
        port: the TCP port; 0 picks a free one.

    Raises:
        OSError: the port cannot be bound.
    """

    def __init__(
        self,
        socket_path: str,
        token: str,
        host: str,
        tls: TlsConfig | None = None,
        port: int = 0,
    ) -> None:
        self._expected = token.encode()
        self._ctx = server_context(tls) if tls is not None else None
        self.store = StoreClient(socket_path, kind="driver", name="data-channel")
        self._listener = socket.create_server((host, port), backlog=128)
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._conns: set[socket.socket] = set()
        self._stopped = False
        self.bytes_sent = 0
        self._thread = threading.Thread(target=self._accept, daemon=True, name="rayfield-data")
        self._thread.start()

    def connections(self) -> int:
        """How many connections are open now."""
        with self._lock:
            return len(self._conns)

    def _accept(self) -> None:
        while True:
            try:
                sock, peer = self._listener.accept()
            except OSError:
                return  # closed
            with self._lock:
                if self._stopped or len(self._conns) >= MAX_CONNECTIONS:
                    sock.close()
                    logger.info("data channel: refused %s (too many connections)", peer)
                    continue
                self._conns.add(sock)
            threading.Thread(
                target=self._serve, args=(sock, peer), daemon=True, name="rayfield-data-conn"
            ).start()

    def _serve(self, raw: socket.socket, peer: Any) -> None:
        sock = raw
        try:
            tune(raw)
            raw.settimeout(HELLO_TIMEOUT_S)
            if self._ctx is not None:
                sock = self._ctx.wrap_socket(raw, server_side=True)
            if not self._hello(sock, peer):
                return
            sock.settimeout(IDLE_TIMEOUT_S)
            while self._request(sock, peer):
                pass
        except (ChannelClosed, ConnectionError, TimeoutError):
            pass  # the client went away (or stayed idle): nothing to report
        except (OSError, ssl.SSLError) as exc:
            logger.info("data channel: connection from %s failed: %s", peer, exc)
        except Exception:
            logger.exception("data channel: serving %s failed", peer)
        finally:
            with self._lock:
                self._conns.discard(raw)
            sock.close()

    def _hello(self, sock: socket.socket, peer: Any) -> bool:
        magic, version, n = HELLO.unpack(recv_exact(sock, HELLO.size))
        if magic != MAGIC or version != VERSION or n > MAX_TOKEN_BYTES:
            logger.warning("data channel: closed %s: not a data channel hello", peer)
            return False
        if not hmac.compare_digest(recv_exact(sock, n), self._expected):
            logger.warning("data channel: closed %s: wrong cluster token", peer)
            return False
        sock.sendall(b"OK")
        return True

    def _request(self, sock: socket.socket, peer: Any) -> bool:
        """Answer one request; False when the connection is to be closed."""
        try:
            head = recv_exact(sock, REQUEST.size)
        except ChannelClosed:
            return False  # closed between requests: the normal end
        tag, object_id, offset, length, wait_ms = REQUEST.unpack(head)
        if tag != b"RQ":
            logger.warning("data channel: closed %s: malformed request header", peer)
            return False
        [buf] = self.store.get([object_id], timeout_s=min(wait_ms, MAX_WAIT_MS) / 1000)
        if buf is None:
            sock.sendall(REPLY.pack(b"RP", NOT_HERE, 0, 0))
            return True
        view = memoryview(buf)
        try:
            size, meta = len(view), buf.metadata
            if offset > size:
                sock.sendall(REPLY.pack(b"RP", BAD_RANGE, size, 0))
                return True
            end = offset + min(length, size - offset)
            sock.sendall(REPLY.pack(b"RP", OK, size, len(meta)) + meta)
            sock.sendall(view[offset:end])  # straight from the shared memory
            self.bytes_sent += end - offset
        finally:
            view.release()
            buf.release()
        return True

    def drop_connections(self) -> int:
        """Shut every open connection down (their transfers fail on the client side,
        which retries on a new connection, falls back or tries again later); how many."""
        with self._lock:
            conns = list(self._conns)
        for sock in conns:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        return len(conns)

    def close(self) -> None:
        """Stop accepting, drop every connection, close the store connection."""
        with self._lock:
            self._stopped = True
        try:
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the accept (Linux)
        except OSError:
            pass
        self._listener.close()
        self.drop_connections()
        self._thread.join(timeout=2)
        self.store.close()
