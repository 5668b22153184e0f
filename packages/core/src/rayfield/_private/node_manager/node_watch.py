"""Nodes that join the cluster, heard of as the GCS publishes them.

The heartbeat reads every node's record each round (``membership.py``), so a node that
joins would be seen by the others only at their next round, up to a heartbeat period
later, and work waiting for it (a task needing a resource only the new node has, work
queued here for busy resources) would wait that long too. :class:`NodeWatch` subscribes
to the GCS's ``NODE_ALIVE`` channel on a thread of its own: a node that registers is
added to the view (:meth:`PeerView.joined`) and reported to ``on_joined`` at once (the
agent tries its waiting work then: ``Spillback.node_joined``).

A Subscribe stream holds a thread of the GCS for its lifetime, and the GCS serves a
bounded number of them (``max_workers // 2``, 16 by default). A node the GCS refuses,
or whose stream breaks (a GCS restart), subscribes again after a pause that doubles from
``retry_s`` up to ``MAX_RETRY_S``; meanwhile it learns of new nodes from its heartbeat
as before, so the stream makes joins faster and is never needed for correctness.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from rayfield._private.gcs.client import GcsClient, GcsSubscription
from rayfield._private.node_manager.membership import PeerView
from rayfield._private.protocol.types import CHANNEL_NODE_ALIVE, NodeInfo

__all__ = ["MAX_RETRY_S", "NodeWatch"]

logger = logging.getLogger("rayfield")

MAX_RETRY_S = 30.0  # longest pause before subscribing again


class NodeWatch:
    """Reports the nodes that join to ``on_joined``, from the GCS's ``NODE_ALIVE`` stream.

    Args:
        gcs: the cluster's GCS client (its channel carries the stream).
        peers: the view a joined node is added to.
        on_joined: called on the watch's thread with each node that joined (alive and
            not known as alive before); exceptions are logged.
        retry_s: first pause before subscribing again after a refusal or a broken
            stream (it doubles up to ``MAX_RETRY_S``; a stream that delivered a message
            starts it over).
    """

    def __init__(
        self,
        gcs: GcsClient,
        peers: PeerView,
        on_joined: Callable[[NodeInfo], None],
        retry_s: float = 0.5,
    ) -> None:
        self.gcs = gcs.with_limits(gcs.timeout_s, retry_deadline_s=0.0)
        self.peers = peers
        self.on_joined = on_joined
        self.retry_s = retry_s
        self.subscribed = threading.Event()  # set while a stream is open (tests wait on it)
        self._lock = threading.Lock()
        self._sub: GcsSubscription | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="rayfield-nodewatch")

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """End the stream and the thread."""
        self._stop.set()
        with self._lock:
            sub = self._sub
        if sub is not None:
            sub.cancel()
        if self._thread.is_alive():
            self._thread.join(timeout=2)

    def _run(self) -> None:
        pause = self.retry_s
        while not self._stop.is_set():
            try:
                if self._watch():
                    pause = self.retry_s
            except Exception as exc:
                logger.debug("watching the GCS for new nodes failed: %s", exc)
            finally:
                self.subscribed.clear()
            if self._stop.wait(pause):
                return
            pause = min(2 * pause, MAX_RETRY_S)

    def _watch(self) -> bool:
        """Subscribe and act on the stream until it ends; True when it delivered any
        message."""
        sub = self.gcs.subscribe([CHANNEL_NODE_ALIVE])
        with self._lock:
            if self._stop.is_set():
                sub.cancel()
                return False
            self._sub = sub
        self.subscribed.set()
        heard = False
        try:
            for message in sub:
                heard = True
                node = message.value
                if isinstance(node, NodeInfo) and self.peers.joined(node):
                    try:
                        self.on_joined(node)
                    except Exception:
                        logger.exception("acting on node %s joining failed", node.address)
        finally:
            with self._lock:
                self._sub = None
        return heard
