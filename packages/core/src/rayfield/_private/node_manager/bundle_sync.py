"""A cluster node's side of placement groups: the GCS's orders, carried out here.

After every heartbeat round the agent calls :meth:`BundleSync.round`: one
``SyncBundles`` call to the GCS (``gcs/groups.py``) with the answers to the last
prepares and the bundles this node holds (``BundleLedger.report``); the reply's orders
are applied to the ledger (a prepare is refused when the node's free resources do not
fit it), the node's totals are set once (``NodeServer.set_total_resources``), and the
work of the groups removed lately is ended (``bundles.end_group_work``: queued tasks
cancelled, actors and running tasks killed), every round while the GCS lists them, so
work that reaches this node after the removal is ended too. A reply that brought
prepares is answered at once (a second call), so a group is created within about one
heartbeat. Answers that did not reach the GCS are sent again; one call a round, never
retried (the next round is the retry), so a GCS that is down only delays groups.

A driver that removes a group calls the ``SyncBundles`` method of the nodes that held
its bundles (``node_service.py``), which runs a round at once: the bundles are released
and the group's queued tasks cancelled before the driver kills the group's actors, so
a task queued behind an actor never starts in the resources the actor frees.
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Any

from rayfield._private.node_manager.bundles import BundleLedger, end_group_work, set_totals

__all__ = ["BundleSync"]

logger = logging.getLogger("rayfield")
CALL_TIMEOUT_S = 2.0
MAX_CALLS_A_ROUND = 3


class BundleSync:
    """Apply the GCS's placement group orders to this node.

    Args:
        gcs: a ``GcsClient``.
        node_id: this node's id.
        server: the node's ``NodeServer``.
        store: a ``StoreClient`` of this node (cancels go through it).
        base: the node's own totals.
    """

    def __init__(
        self, gcs: Any, node_id: bytes, server: Any, store: Any, base: dict[str, float]
    ) -> None:
        self._gcs = gcs.with_limits(CALL_TIMEOUT_S, 0.0)
        self._node_id = node_id
        self._server = server
        self._store = store
        self.ledger = BundleLedger(base)
        self._answers: list[dict[str, Any]] = []
        self._lock = threading.Lock()  # rounds of the heartbeat and of SyncBundles calls
        self._gpu_table: dict[str, list[int]] = {}

    def round(self) -> None:
        """Sync with the GCS (see the module docstring); errors are logged, not raised."""
        with self._lock:
            self._round()

    def _round(self) -> None:
        for _ in range(MAX_CALLS_A_ROUND):
            body = {
                "node_id": self._node_id.hex(),
                "answers": self._answers,
                "held": self.ledger.report(),
            }
            try:
                reply = self._gcs.call("SyncBundles", {"data": json.dumps(body).encode()})
                news = json.loads(reply["data"])
            except Exception as exc:  # the GCS is down or restarting: the next round
                logger.debug("placement group sync failed: %s", exc)
                return
            self._answers = []
            self.apply(news["orders"])
            if news["removed"]:
                end_group_work(
                    self._server, self._store, set(news["removed"]), "placement group removed"
                )
            if not self._answers:
                return

    def apply(self, orders: list[dict[str, Any]]) -> None:
        """Carry out orders (``prepare``, ``commit``, ``release``) and set the totals."""
        if not orders:
            return
        snap = self._server.scheduler_snapshot()
        available, gpu_used = dict(snap["available"]), list(snap.get("gpu_used", ()))
        for order in orders:
            pg_id = bytes.fromhex(order["pg"])
            if order["op"] == "prepare":
                bundles = {int(i): b for i, b in order["bundles"].items()}
                ok = self.ledger.prepare(pg_id, bundles, available, gpu_used)
                for b in bundles.values() if ok else ():
                    for k, v in b.items():
                        available[k] = available.get(k, 0.0) - v
                self._answers.append({"pg": order["pg"], "indices": list(bundles), "ok": ok})
            elif order["op"] == "commit":
                self.ledger.commit(pg_id, order["indices"])
            elif order["op"] == "release":
                self.ledger.release(pg_id, order["indices"])
        self._gpu_table = set_totals(self._server, self.ledger, self._gpu_table)
