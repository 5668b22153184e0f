"""A driver's direct calls to actors: straight to the actor's worker, results stored here.

An actor call through the node crosses four processes (driver, its node, the actor's
node, the worker); a direct call crosses two. :class:`DirectCaller` (one per actor
handle, under the handle's lock) follows :class:`~.direct_plan.DirectPlan`: it looks up
the worker's record (:func:`find_worker`: the GCS actor table, then the record in the
actor's node's store, ``FetchObjects`` behind the cluster token), connects with the
record's secret, and sends the calls that may go direct (``runtime/direct_wire.py``).
A reader thread stores each reply's results in this node's store under the call's
return ids, pinned by this process from the call on, so ``get``, ``wait`` and refs passed
to tasks work as for any object made here.

When the connection is lost (the worker died, its node died, the actor was killed), the
unanswered calls are sent through the node in their order, which restarts or fails them
as it does its own calls: the first one, which may have been running, counts as an
attempt (``max_task_retries`` 0: it fails with ``ActorDiedError``); the others were
queued behind it and go as they are.

Only drivers in a cluster without TLS make direct calls, and not when
``RAYFIELD_DIRECT_CALLS=0``; workers' calls go through their node.
"""

from __future__ import annotations

import collections
import functools
import logging
import os
import socket
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import rayfield.exceptions as exceptions
from rayfield._private import context
from rayfield._private.common import serialization
from rayfield._private.common.ids import ID_SIZE
from rayfield._private.common.socket_io import ChannelClosed, recv_exact
from rayfield._private.driver import names
from rayfield._private.driver.direct_plan import DirectPlan
from rayfield._private.runtime import direct_wire as wire
from rayfield._private.runtime.object_ref import ObjectRef
from rayfield._private.runtime.runtime import INLINE_ARGS_BYTES, SerializedArgs, StoreRuntime
from rayfield.store import ObjectExistsError

__all__ = ["DirectCaller", "close_all", "enabled", "find_worker"]

logger = logging.getLogger("rayfield")

CONNECT_TIMEOUT_S = 5.0
NO_FUNCTION = bytes(ID_SIZE)  # actor calls name no exported function
_callers: weakref.WeakSet[DirectCaller] = weakref.WeakSet()


def enabled(rt: Any) -> bool:
    """Whether calls from this process may go direct: a driver in a cluster, no TLS,
    not turned off with ``RAYFIELD_DIRECT_CALLS=0``."""
    return (
        isinstance(rt, StoreRuntime)
        and not rt.is_worker
        and context.gcs_address() is not None
        and os.environ.get("RAYFIELD_DIRECT_CALLS", "1") != "0"
        and not os.environ.get("RAYFIELD_TLS_CERT")
    )


@functools.cache
def _channels(address: str) -> Any:
    from rayfield._private.driver.launch import find_token
    from rayfield._private.node_manager.node_service import PeerChannels

    return PeerChannels(find_token(address, context.sessions_root()), None)


def find_worker(actor_id: bytes) -> tuple[str, int, bytes] | None:
    """``(host, port, secret)`` of the direct-call server of ``actor_id``'s worker, or
    None when it has none now (not alive, async or threaded, not published yet)."""
    from rayfield._private.protocol.types import ActorState

    address = context.gcs_address()
    if address is None:
        return None
    gcs = names.client(address)
    info = gcs.get_actor(actor_id=actor_id)
    if info is None or info.state != ActorState.ALIVE or not info.node_id:
        return None
    node = next((n for n in gcs.get_nodes() if n.node_id == info.node_id and n.alive), None)
    if node is None:
        return None
    rid = wire.record_id(node.node_id, actor_id)
    _, inline = _channels(address).stub(node.address).fetch_objects([rid], 0, 4096)
    if rid not in inline:
        return None
    _meta, data = inline[rid]
    port, secret, _pid = wire.RECORD.unpack(data)
    return node.address.rsplit(":", 1)[0], port, secret


@dataclass
class _Pending:
    """A direct call sent and not answered yet."""

    task_id: bytes
    return_ids: list[bytes]
    name: str
    args: SerializedArgs


class DirectCaller:
    """The direct path of one actor handle. Every public method but :meth:`close` is
    called with the handle's lock held (``lock``).

    Args:
        rt: this process's runtime.
        actor_id: the actor's id.
        class_name: for the calls' names.
        max_task_retries: the actor's (-1: without limit).
        lock: the handle's lock.
        first_seq: the handle's next node-call sequence number (the caller numbers
            its node calls from then on; it holds no reference to the handle, so the
            handle goes when its user drops it).
        caller_id: the handle's caller id on the node's path.
    """

    def __init__(
        self,
        rt: StoreRuntime,
        actor_id: bytes,
        class_name: str,
        max_task_retries: int,
        lock: threading.Lock,
        first_seq: int,
        caller_id: bytes,
    ) -> None:
        self.rt = rt
        self.actor_id = actor_id
        self.class_name = class_name
        self.retries = max_task_retries
        self.cond = threading.Condition(lock)
        self.seq = first_seq
        self.caller_id = caller_id
        self.plan = DirectPlan()
        self.sock: socket.socket | None = None
        self.pending: collections.deque[_Pending] = collections.deque()
        self.closed = False
        self.on_drained: Callable[[], None] | None = None
        self.last_node_ref: ObjectRef[Any] | None = None  # the last node call's first return
        _callers.add(self)

    # ---- calls (handle lock held) ----------------------------------------------------

    def call(self, name: str, args: Any, kwargs: Any, num_returns: int) -> list[ObjectRef[Any]]:
        """Send one call by the path the plan chooses; the refs of its returns."""
        rt = self.rt
        args_obj = rt.serialize_args(args, kwargs)
        eligible = (
            num_returns >= 1
            and not args_obj.pins
            and not args_obj.handles
            and args_obj.ser.total_bytes <= INLINE_ARGS_BYTES
        )
        choice = self.plan.choose(eligible, rt.client.contains)
        if self.plan.last_node_return is None:
            self.last_node_ref = None
        if choice.direct and self.sock is not None:
            return self._send_direct(name, args_obj, num_returns)
        if choice.drain:
            while self.plan.unacked and self.sock is not None:
                self.cond.wait()
        refs = _owned(rt, self._send_node(name, args_obj, num_returns, self.retries))
        self.plan.sent_node(refs[0].binary() if refs else None)
        # Held until the plan has seen it sealed: a ref dropped at once (a call made for
        # its effect) would be freed, and its call never seen done.
        self.last_node_ref = refs[0] if refs else None
        if choice.probe:
            threading.Thread(target=self._probe, daemon=True, name="rayfield-probe").start()
        return refs

    def _send_direct(
        self, name: str, args_obj: SerializedArgs, num_returns: int
    ) -> list[ObjectRef[Any]]:
        rt = self.rt
        task_id = rt.ids.task_id()
        return_ids = [rt.ids.return_id(task_id, i) for i in range(num_returns)]
        # The refs exist before the reply can: the reader stores the results of live refs
        # only, pinning them first (``_store``), so their pins match the refs' releases.
        refs = _owned(rt, return_ids)
        options: dict[str, Any] = {"submitted": time.time(), "job": rt.ids.job_id}
        if rt.serializer_ids:
            options["serializers"] = rt.serializer_ids
        ser = args_obj.ser
        frame = wire.encode_call(
            task_id, return_ids, name, ser.to_bytes(), bytes(ser.metadata), options
        )
        self.pending.append(_Pending(task_id, return_ids, name, args_obj))
        self.plan.sent_direct()
        rt.direct_in_flight.update(return_ids)
        assert self.sock is not None
        try:
            self.sock.sendall(frame)
        except OSError:
            pass  # the reader finds the connection lost and sends the call again
        return refs

    def _send_node(
        self,
        name: str,
        args_obj: SerializedArgs,
        num_returns: int,
        retries: int,
        task_id: bytes | None = None,
    ) -> list[bytes]:
        return self.rt.submit_serialized(
            "actor_method",
            NO_FUNCTION,
            args_obj,
            num_returns,
            f"{self.class_name}.{name}",
            {},
            max_retries=retries,
            actor_id=self.actor_id,
            caller_id=self.caller_id,
            sequence_no=self._next_seq(),
            task_id=task_id,
            pin_returns=task_id is None,
        )

    def _next_seq(self) -> int:
        seq = self.seq
        self.seq += 1
        return seq

    def release(self, done: Callable[[], None]) -> None:
        """The handle is gone: run ``done`` (drop its hold on the actor) once the calls
        in flight are answered or resubmitted through the node, then close."""
        with self.cond:
            if self.pending and self.sock is not None:
                self.on_drained = done
                return
        self.close()
        done()

    # ---- the connection --------------------------------------------------------------

    def _probe(self) -> None:
        sock = None
        try:
            found = find_worker(self.actor_id)
            if found is not None:
                sock = _connect(*found)
        except Exception as exc:
            logger.debug("direct calls: no path to %s: %s", self.actor_id.hex(), exc)
        with self.cond:
            if self.closed or sock is None:
                if sock is not None:
                    sock.close()
                self.plan.probed(False)
                return
            self.sock = sock
            self.plan.probed(True)
        threading.Thread(
            target=self._read, args=(sock,), daemon=True, name="rayfield-direct-reply"
        ).start()

    def _read(self, sock: socket.socket) -> None:
        reader = wire.FrameReader(sock)
        try:
            while True:
                frames = reader.frames()
                if frames is None:
                    break
                calls = [(self.pending.popleft(), wire.decode_reply(f)) for f in frames]
                self._store(calls)
                self._arrived([r for call, _ in calls for r in call.return_ids])
                with self.cond:
                    self.plan.acked(len(frames))
                    self.cond.notify_all()
                    if self.on_drained is not None and not self.pending:
                        self._finish_release()
                        return
        except Exception as exc:  # a reply this process cannot take: the path is lost
            if not self.closed:
                logger.warning("direct calls to %s: %s", self.actor_id.hex(), exc)
        self._lost(sock)

    def _store(self, calls: list[tuple[_Pending, list[tuple[bytes, bytes, list[bytes]]]]]) -> None:
        """Store the results of answered calls whose refs are still here, pinned for
        those refs (one pin message for them all)."""
        client = self.rt.client
        results = [
            (rid, entry)
            for call, entries in calls
            for rid, entry in zip(call.return_ids, entries, strict=False)
        ]
        live = self.rt.refs.pin_live([rid for rid, _ in results])
        for rid, (data, meta, actors) in results:
            if rid not in live:
                continue  # its refs are gone: nobody reads it
            if actors:
                self.rt.handles.in_object(rid, actors)
            try:
                if len(data) <= INLINE_ARGS_BYTES:
                    client.put(rid, data, meta, False)
                else:
                    view = client.create(rid, len(data), meta)
                    view[:] = data
                    client.seal(rid)
            except ObjectExistsError:
                pass

    def _lost(self, sock: socket.socket) -> None:
        """The connection ended: send its unanswered calls through the node, in order."""
        with self.cond:
            sock.close()
            if self.sock is not sock:
                return
            self.sock = None
            calls, self.pending = list(self.pending), collections.deque()
            # Their refs' pins (the node's path does not pin them: pin_returns is off).
            live = self.rt.refs.pin_live([r for call in calls for r in call.return_ids])
            for i, call in enumerate(calls):
                retries = self.retries
                if i == 0 and retries == 0:  # it may have been running: no attempt left
                    self._fail(call, live)
                    continue
                if i == 0 and retries > 0:
                    retries -= 1
                self._send_node(call.name, call.args, len(call.return_ids), retries, call.task_id)
                self.plan.sent_node(call.return_ids[0])
                self.last_node_ref = ObjectRef(call.return_ids[0])
            self.plan.lost()
            self.cond.notify_all()
            self._arrived([r for call in calls for r in call.return_ids])
            if self.on_drained is not None:
                self._finish_release()

    def _arrived(self, return_ids: list[bytes]) -> None:
        """Those returns are stored here, or will come through the node: a get of them
        goes to the store."""
        rt = self.rt
        with rt.direct_arrived:
            rt.direct_in_flight.difference_update(return_ids)
            rt.direct_arrived.notify_all()

    def _fail(self, call: _Pending, live: set[bytes]) -> None:
        err = exceptions.ActorDiedError(
            f"the actor's worker process died while running this call "
            f"({self.class_name}.{call.name}) and max_task_retries is 0"
        )
        obj = serialization.serialize_error(err)
        for rid in call.return_ids:
            if rid in live:
                self.rt.store_serialized(rid, obj)

    def _finish_release(self) -> None:
        done, self.on_drained = self.on_drained, None
        self.closed = True
        if self.sock is not None:
            _shutdown(self.sock)
        if done is not None:
            done()

    def close(self) -> None:
        """Close the connection (the reader ends; no call is resubmitted)."""
        with self.cond:
            self.closed = True
            sock, self.sock = self.sock, None
        if sock is not None:
            _shutdown(sock)


def _owned(rt: StoreRuntime, return_ids: list[bytes]) -> list[ObjectRef[Any]]:
    """Refs of the returns of a call this process made (it pinned them)."""
    for r in return_ids:
        rt.refs.own(r)
    return [ObjectRef(r, _pinned=True) for r in return_ids]


def _connect(host: str, port: int, secret: bytes) -> socket.socket:
    sock = socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S)
    try:
        wire.tune(sock)
        sock.sendall(wire.HELLO.pack(wire.MAGIC, wire.VERSION, secret))
        try:
            answer = recv_exact(sock, 2)
        except ChannelClosed:
            raise ConnectionError("the worker refused the direct-call hello") from None
        if answer != b"OK":
            raise ConnectionError("the worker answered the hello wrongly")
        sock.settimeout(None)
    except BaseException:
        sock.close()
        raise
    return sock


def _shutdown(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


def close_all() -> None:
    """Close every direct connection of this process (at shutdown)."""
    for caller in list(_callers):
        caller.close()
