"""A worker's server of direct calls to the sequential actor it hosts (``direct_wire.py``).

Started once the actor's constructor ran, in a cluster without TLS, for an actor that
runs one call at a time (not async, ``max_concurrency`` 1). Each connection has a thread
that reads the calls that arrived, runs them one after the other (``execute``, which
holds the actor's lock, so calls from the node never run at the same time) and sends
their replies together. The record that tells callers the port lives in the node's store
under :func:`~.direct_wire.record_id`, pinned by this process (the pin goes when the
process does).
"""

from __future__ import annotations

import hmac
import logging
import os
import socket
import threading
from collections.abc import Callable
from typing import Any

from rayfield._private.common.socket_io import recv_exact
from rayfield._private.runtime import direct_wire as wire
from rayfield.store import ObjectExistsError

__all__ = ["DirectServer", "enabled_here"]

logger = logging.getLogger("rayfield")

HELLO_TIMEOUT_S = 10.0
ENV_DIRECT = "RAYFIELD_DIRECT_CALLS"  # "0": no direct calls (callers and workers)
ENV_NODE_IP = "RAYFIELD_NODE_IP"  # the node's address, where its workers listen


def enabled_here() -> bool:
    """Whether this worker may serve direct calls: in a cluster (its node set
    ``RAYFIELD_NODE_IP``), without TLS (the calls would bypass it), not turned off."""
    return (
        os.environ.get(ENV_DIRECT, "1") != "0"
        and bool(os.environ.get(ENV_NODE_IP))
        and not os.environ.get("RAYFIELD_TLS_CERT")
    )


Execute = Callable[[tuple[Any, ...]], list[tuple[bytes, bytes, list[bytes]]]]


class DirectServer:
    """Listens on the node's address for direct calls and serves them (started).

    Args:
        execute: runs one decoded call; returns its reply's entries.
        host: the address to listen on.

    Raises:
        OSError: no port could be bound.
    """

    def __init__(self, execute: Execute, host: str) -> None:
        self.execute = execute
        self.secret = os.urandom(wire.SECRET_BYTES)
        self._listener = socket.create_server((host, 0), backlog=64)
        self.port: int = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True, name="rayfield-direct").start()

    def publish(self, client: Any, actor_id: bytes) -> None:
        """Store this server's record for callers in the node's store (replacing the
        record a previous process of the actor left there)."""
        rid = wire.record_id(client.node_id, actor_id)
        record = wire.RECORD.pack(self.port, self.secret, os.getpid())
        client.pin([rid])
        for _ in range(3):
            try:
                client.put(rid, record, b"RAW", True)
                return
            except ObjectExistsError:
                client.delete([rid])  # a dead process's record: unpinned, so it goes
        logger.warning("direct calls: could not publish the record of %s", actor_id.hex())

    def _accept(self) -> None:
        while True:
            try:
                sock, peer = self._listener.accept()
            except OSError:
                return
            threading.Thread(
                target=self._serve, args=(sock, peer), daemon=True, name="rayfield-direct-conn"
            ).start()

    def _serve(self, sock: socket.socket, peer: Any) -> None:
        try:
            wire.tune(sock)
            sock.settimeout(HELLO_TIMEOUT_S)
            if not self._hello(sock, peer):
                return
            sock.settimeout(None)
            reader = wire.FrameReader(sock, wire.MAX_CALL_BYTES)
            while True:
                frames = reader.frames()
                if frames is None:
                    return
                replies = [wire.encode_reply(self.execute(wire.decode_call(f))) for f in frames]
                sock.sendall(b"".join(replies))
        except wire.Malformed as exc:
            logger.warning("direct calls: closed %s: %s", peer, exc)
        except OSError:
            pass  # the caller went away
        except Exception:
            logger.exception("direct calls: serving %s failed", peer)
        finally:
            sock.close()

    def _hello(self, sock: socket.socket, peer: Any) -> bool:
        magic, version, secret = wire.HELLO.unpack(recv_exact(sock, wire.HELLO.size))
        if magic != wire.MAGIC or version != wire.VERSION:
            logger.warning("direct calls: closed %s: not a direct-call hello", peer)
            return False
        if not hmac.compare_digest(secret, self.secret):
            logger.warning("direct calls: closed %s: wrong secret", peer)
            return False
        sock.sendall(b"OK")
        return True
