"""Pulls over the data channel (``data_channel.py``): an object in chunks, on several
streams at once, from every node that holds it, straight into the local store.

:meth:`DataClient.pull` asks the first holder for the object's first chunk; the reply
gives the size and metadata, so the destination is ``create``d in the local store and
the chunk is received into it. The rest is split into chunks of ``CHUNK_BYTES``
(:class:`~.chunk_plan.ChunkPlan`) that up to ``STREAMS_PER_OBJECT`` streams fetch in
parallel, spread over the holders; each chunk is received with ``recv_into`` into its
slice of the destination, so no byte of the object passes through the Python heap. A
chunk whose source fails is fetched from another source; when none is left the object
is aborted (nothing leaks) and the pull reports failure. The object is sealed once every
byte is in.

Memory stays bounded: the destination is the object's own allocation in the store
(within the store's limit), every connection's kernel buffers are bounded
(``SOCKET_BUFFER_BYTES``), and the chunks requested at once by all the pulls of a node
are limited by :class:`ByteBudget` (``BYTES_IN_FLIGHT``).

Connections are authenticated once (the cluster token, mutual TLS when the cluster has
it) and kept per peer for the next pulls. A peer whose channel cannot be set up (an
older node, a port that cannot be reached) raises :class:`ChannelUnavailable`, and the
object manager uses the gRPC ``PullObject`` stream instead.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait

from rayfield._private.common.ids import short
from rayfield._private.node_manager.chunk_plan import ChunkPlan
from rayfield._private.node_manager.data_channel import (
    HELLO,
    MAGIC,
    OK,
    REPLY,
    REQUEST,
    VERSION,
    client_context,
    recv_exact,
    recv_into_exact,
    tune,
)
from rayfield._private.transport import TlsConfig
from rayfield.store import StoreClient
from rayfield.store.errors import ObjectExistsError

__all__ = ["ByteBudget", "ChannelUnavailable", "DataClient"]

logger = logging.getLogger("rayfield")

CHUNK_BYTES = 8 << 20
STREAMS_PER_OBJECT = 4
BYTES_IN_FLIGHT = 64 << 20  # chunks requested at once by all pulls of a node
MAX_IDLE_PER_PEER = 8  # authenticated connections kept open per peer
CONNECT_TIMEOUT_S = 5.0
IO_TIMEOUT_S = 30.0  # a transfer that moves nothing for this long fails


class ChannelUnavailable(Exception):
    """No data channel to a peer (it has none, or it cannot be reached or refused the
    handshake): use the gRPC stream instead."""


class ByteBudget:
    """A count of bytes in flight that :meth:`acquire` keeps at most ``limit`` (one
    request larger than the limit runs alone)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self._cond = threading.Condition()

    def acquire(self, n: int) -> None:
        with self._cond:
            while self.used > 0 and self.used + n > self.limit:
                self._cond.wait()
            self.used += n

    def release(self, n: int) -> None:
        with self._cond:
            self.used -= n
            self._cond.notify_all()


class DataClient:
    """Pulls objects from other nodes' data channels; see the module docstring.

    Args:
        token: the cluster token, presented in every connection's hello.
        tls: mutual TLS (None: plaintext).
        port_of: the data port of the node whose service is at an address (asked of
            that node over gRPC; 0: it has none); raises when the node cannot be asked.
        chunk_bytes: bytes per chunk.
        streams: streams per object.
        budget: bytes in flight for all pulls of this node.
    """

    def __init__(
        self,
        token: str,
        tls: TlsConfig | None,
        port_of: Callable[[str], int],
        chunk_bytes: int = CHUNK_BYTES,
        streams: int = STREAMS_PER_OBJECT,
        budget: int = BYTES_IN_FLIGHT,
    ) -> None:
        self._hello = HELLO.pack(MAGIC, VERSION, len(token.encode())) + token.encode()
        self._ctx = client_context(tls) if tls is not None else None
        self.port_of = port_of
        self.chunk_bytes = chunk_bytes
        self.streams = streams
        self.budget = ByteBudget(budget)
        self._lock = threading.Lock()
        self._ports: dict[str, int] = {}
        self._idle: dict[str, list[socket.socket]] = {}
        self._pool = ThreadPoolExecutor(max_workers=16, thread_name_prefix="rayfield-stream")

    # ---- connections ----------------------------------------------------------------

    def _port(self, address: str) -> int:
        with self._lock:
            port = self._ports.get(address)
        if port is None:
            try:
                port = int(self.port_of(address))
            except Exception as exc:
                raise ChannelUnavailable(f"cannot ask {address} for its data port: {exc}") from exc
            with self._lock:
                self._ports[address] = port
        if not port:
            raise ChannelUnavailable(f"{address} has no data channel")
        return port

    def _connect(self, address: str) -> socket.socket:
        host = address.rsplit(":", 1)[0]
        port = self._port(address)
        try:
            sock = socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S)
        except OSError as exc:
            with self._lock:  # asked again next time: the node may listen elsewhere now
                self._ports.pop(address, None)
            raise ChannelUnavailable(f"cannot connect to {host}:{port}: {exc}") from exc
        try:
            tune(sock)
            if self._ctx is not None:
                sock = self._ctx.wrap_socket(sock, server_hostname=host)
            sock.sendall(self._hello)
            if recv_exact(sock, 2) != b"OK":
                raise ConnectionError("unexpected answer to the hello")
            sock.settimeout(IO_TIMEOUT_S)
        except OSError as exc:
            sock.close()
            raise ChannelUnavailable(f"{host}:{port} refused the data channel: {exc}") from exc
        return sock

    def _checkout(self, address: str) -> tuple[socket.socket, bool]:
        """A connection to ``address`` and whether it was kept from an earlier pull."""
        with self._lock:
            idle = self._idle.get(address)
            if idle:
                return idle.pop(), True
        return self._connect(address), False

    def _checkin(self, address: str, sock: socket.socket) -> None:
        with self._lock:
            idle = self._idle.setdefault(address, [])
            if len(idle) < MAX_IDLE_PER_PEER:
                idle.append(sock)
                return
        sock.close()

    def forget(self, address: str) -> None:
        """Close the idle connections to ``address`` and forget its port (it died)."""
        with self._lock:
            idle = self._idle.pop(address, [])
            self._ports.pop(address, None)
        for sock in idle:
            sock.close()

    def close(self) -> None:
        with self._lock:
            idle = [s for socks in self._idle.values() for s in socks]
            self._idle.clear()
        for sock in idle:
            sock.close()
        self._pool.shutdown(wait=False, cancel_futures=True)

    # ---- pulls ----------------------------------------------------------------------

    @staticmethod
    def _ask(
        sock: socket.socket, object_id: bytes, offset: int, length: int, wait_ms: int
    ) -> tuple[int, int, bytes]:
        """Send a request; ``(status, size, metadata)`` of the reply (its data follows)."""
        sock.sendall(REQUEST.pack(b"RQ", object_id, offset, length, wait_ms))
        tag, status, size, meta_len = REPLY.unpack(recv_exact(sock, REPLY.size))
        if tag != b"RP":
            raise ConnectionError("malformed reply header")
        return status, size, recv_exact(sock, meta_len) if meta_len else b""

    def _request(
        self, address: str, object_id: bytes, offset: int, length: int, wait_ms: int
    ) -> tuple[socket.socket, int, int, bytes]:
        """Ask ``address`` for a range: ``(connection, status, size, metadata)``, the data
        next on the connection. A kept connection the peer has closed meanwhile (idle too
        long, or the peer restarted) is replaced by a new one once.

        Raises:
            ChannelUnavailable: no connection could be made.
            OSError: the request failed on a new connection.
        """
        sock, reused = self._checkout(address)
        try:
            return (sock, *self._ask(sock, object_id, offset, length, wait_ms))
        except OSError:
            sock.close()
            if not reused:
                raise
        sock = self._connect(address)
        try:
            return (sock, *self._ask(sock, object_id, offset, length, wait_ms))
        except OSError:
            sock.close()
            raise

    def pull(
        self, store: StoreClient, object_id: bytes, sources: Sequence[str], wait_ms: int
    ) -> tuple[bool | None, str, int]:
        """Copy ``object_id`` from the first of ``sources`` that has it (its chunks from
        all of them) into ``store`` and seal it.

        Returns:
            ``(stored, address, size)``: ``stored`` True when the object is stored now,
            None when it was here already, False when no source had it (or the transfer
            broke off: the partial object is aborted); ``address``: the source that
            answered first; ``size``: the object's size in bytes.

        Raises:
            ChannelUnavailable: no source could be reached on the channel and none said
                that it lacks the object.
            StoreError: the local store cannot hold the object (e.g. full).
        """
        unavailable: dict[str, str] = {}  # address -> why
        for address in sources:
            try:
                sock, status, size, meta = self._request(
                    address, object_id, 0, self.chunk_bytes, wait_ms
                )
            except ChannelUnavailable as exc:
                unavailable[address] = str(exc)
                continue
            except OSError as exc:
                logger.info("pulling %s from %s failed: %s", short(object_id), address, exc)
                continue
            if status != OK:
                self._checkin(address, sock)
                continue
            others = [a for a in sources if a != address and a not in unavailable]
            stored = self._receive(store, sock, object_id, size, meta, address, others)
            return stored, address, size
        if unavailable:
            raise ChannelUnavailable("; ".join(unavailable.values()))
        return False, "", 0

    def _receive(
        self,
        store: StoreClient,
        sock: socket.socket,
        object_id: bytes,
        size: int,
        meta: bytes,
        address: str,
        others: list[str],
    ) -> bool | None:
        """Store the object whose first reply came on ``sock`` (its data is next)."""
        try:
            view = store.create(object_id, size, meta)
        except ObjectExistsError:
            sock.close()  # the reply's data is still on the way: the connection goes
            return None
        except BaseException:
            sock.close()
            raise
        plan = ChunkPlan(size, self.chunk_bytes, [address, *others])
        first = plan.next()  # the chunk whose data follows the reply on ``sock``
        try:
            self._run(plan, object_id, view, first, sock)
        except BaseException as exc:
            store.abort(object_id)
            if isinstance(exc, OSError):
                logger.info("pulling %s from %s failed: %s", short(object_id), address, exc)
                return False
            raise
        if not plan.complete:
            store.abort(object_id)
            logger.info("pulling %s: every source failed; aborted", short(object_id))
            return False
        store.seal(object_id)
        return True

    def _run(
        self,
        plan: ChunkPlan,
        object_id: bytes,
        view: memoryview,
        first: tuple[int, int, str] | None,
        sock: socket.socket,
    ) -> None:
        """Fetch ``plan``'s chunks into ``view`` on up to ``streams`` streams until it is
        complete or hopeless. ``first`` (running in ``plan``) is the chunk whose data
        follows on ``sock``: this thread receives it while the other streams start on
        the rest, then becomes one of them."""
        lock = threading.Lock()
        extra = min(self.streams - 1, len(plan.pending))
        futures = [self._pool.submit(self._fill, plan, lock, object_id, view) for _ in range(extra)]
        try:
            if first is None:  # an empty object: no data follows
                self._checkin(plan.sources[0], sock)
            else:
                offset, length, source = first
                ok = self._finish(source, sock, view[offset : offset + length])
                with lock:
                    (plan.done if ok else plan.failed)(offset, length)
            self._fill(plan, lock, object_id, view)
        finally:
            wait(futures)  # no stream writes into the object once this returns or raises
        for future in futures:
            future.result()
        while not plan.complete and not plan.hopeless:  # chunks put back by a failure
            self._fill(plan, lock, object_id, view)

    def _fill(
        self, plan: ChunkPlan, lock: threading.Lock, object_id: bytes, view: memoryview
    ) -> None:
        """One stream: fetch chunks of ``plan`` until none is left to start."""
        while True:
            with lock:
                nxt = plan.next()
            if nxt is None:
                return
            offset, length, source = nxt
            self.budget.acquire(length)
            try:
                ok = self._chunk(source, object_id, offset, view[offset : offset + length])
            finally:
                self.budget.release(length)
            with lock:
                if ok:
                    plan.done(offset, length)
                else:
                    plan.failed(offset, length)

    def _chunk(self, address: str, object_id: bytes, offset: int, into: memoryview) -> bool:
        """Receive the object's bytes from ``offset`` into ``into``; whether they came."""
        try:
            sock, status, size, _ = self._request(address, object_id, offset, len(into), 0)
        except (ChannelUnavailable, OSError) as exc:
            logger.info("chunk of %s from %s failed: %s", short(object_id), address, exc)
            return False
        if status != OK:
            self._checkin(address, sock)  # nothing follows the reply
            return False
        if size < offset + len(into):  # not the object planned: drop what follows
            sock.close()
            logger.info(
                "chunk of %s from %s: the object is %d bytes", short(object_id), address, size
            )
            return False
        return self._finish(address, sock, into)

    def _finish(self, address: str, sock: socket.socket, into: memoryview) -> bool:
        """Receive the data of a reply (``len(into)`` bytes) from ``sock`` into ``into``
        and keep the connection; whether they came (if not, the connection is closed)."""
        try:
            recv_into_exact(sock, into)
        except OSError as exc:
            sock.close()
            logger.info("a chunk from %s failed: %s", address, exc)
            return False
        self._checkin(address, sock)
        return True
