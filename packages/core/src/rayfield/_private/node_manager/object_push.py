"""Objects a node sends to another node before that node asks: the push side of transfer.

Pulling an object that is still being made costs a node a long poll and a pull after it
is sealed, plus the wake-up of its fetch loop. A node therefore pushes the arguments of
a task it forwards to the node the task goes to (the pushed ids travel in the forward
request, so the receiver does not poll for them). Results of forwarded tasks are not
pushed: the origin pulls them (its long poll, ``FetchObjects``, brings small ones back in
its reply), and the node that made them keeps them pinned until then.

An object up to ``inline_max_bytes`` travels inside the ``PushObject`` call; a larger one
is announced only, and the receiver pulls it in chunks when a client there needs it. The
pusher watches seals on its own store connection (notifications), so an object is pushed
the moment it exists, with no polling. A receiver that gets no push (the sender died, its
store was full) asks for the object after a delay (``agent.PUSH_FALLBACK_S``). The same
subscription reports the store's removals (``deleted``, ``evicted``) to ``removed``
(``object_frees.py``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from rayfield._private.common.ids import short
from rayfield.store import StoreClient

logger = logging.getLogger("rayfield")

INLINE_MAX_BYTES = 1 << 20  # pushed inside the call up to this size; larger ones announced

# send(address, object_id, data_size, metadata, data or None) -> whether the receiver has it
SendFn = Callable[[str, bytes, int, bytes, Any], bool]
# done(object_id, address, ok): after each push
DoneFn = Callable[[bytes, str, bool], None]
# removed(object_id, evicted, data_size): the local store removed an object
RemovedFn = Callable[[bytes, bool, int], None]


class ObjectPusher:
    """Pushes objects of the local store to other nodes once they are sealed here.

    Args:
        socket_path: the local node's socket; the pusher opens its own store connection
            and subscribes it to seal notifications.
        send: delivers one push (``NodeStub.push`` on the right channel); may raise.
        done: called after each push with whether the receiver holds the object now.
        inline_max_bytes: objects up to this size travel inline; larger ones are
            announced and pulled by the receiver.
        removed: told of every object the store removes (None: nobody).
    """

    def __init__(
        self,
        socket_path: str,
        send: SendFn,
        done: DoneFn,
        inline_max_bytes: int = INLINE_MAX_BYTES,
        removed: RemovedFn | None = None,
    ) -> None:
        self.send = send
        self.done = done
        self.removed = removed
        self.inline_max_bytes = inline_max_bytes
        self.client = StoreClient(socket_path, kind="driver")
        self.client.subscribe()
        self._lock = threading.Lock()
        self._targets: dict[bytes, set[str]] = {}  # object id -> addresses waiting for it
        self._stop = threading.Event()
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="rayfield-push")
        self._thread = threading.Thread(target=self._watch, daemon=True, name="rayfield-push")
        self._thread.start()

    def push_when_sealed(self, object_id: bytes, address: str) -> None:
        """Push ``object_id`` to the node at ``address`` once it is sealed here (at once
        when it already is)."""
        with self._lock:
            self._targets.setdefault(object_id, set()).add(address)
        if self.client.contains(object_id):
            self._due(object_id)

    def pending(self) -> int:
        """How many objects wait to be sealed here to be pushed."""
        with self._lock:
            return len(self._targets)

    def forget(self, address: str) -> None:
        """Push nothing more to ``address`` (that node died)."""
        with self._lock:
            for oid in [o for o, a in self._targets.items() if address in a]:
                self._targets[oid].discard(address)
                if not self._targets[oid]:
                    del self._targets[oid]

    def _watch(self) -> None:
        while not self._stop.is_set():
            try:
                note = self.client.next_notification(timeout_s=0.2)
            except Exception as exc:
                if not self._stop.is_set():
                    logger.warning("object push: the store connection failed: %s", exc)
                return
            if note is None:
                continue
            if note[0] != "sealed":
                if self.removed is not None:
                    try:
                        self.removed(note[1], note[0] == "evicted", note[2])
                    except Exception:
                        logger.exception("object push: reporting a removal failed")
                continue
            with self._lock:
                wanted = note[1] in self._targets
            if wanted:
                self._due(note[1])

    def _due(self, object_id: bytes) -> None:
        with self._lock:
            addresses = self._targets.pop(object_id, set())
        for address in addresses:
            self._pool.submit(self._push, object_id, address)

    def _push(self, object_id: bytes, address: str) -> None:
        ok = False
        try:
            [buf] = self.client.get([object_id], timeout_s=0)
            if buf is None:  # gone again (freed by its owner): the receiver asks if it must
                logger.debug("object push: %s is no longer here", short(object_id))
            else:
                view = memoryview(buf)
                try:
                    inline = view if len(view) <= self.inline_max_bytes else None
                    ok = self.send(address, object_id, len(view), buf.metadata, inline)
                finally:
                    view.release()
                    buf.release()
        except Exception as exc:
            logger.info("pushing %s to %s failed: %s", short(object_id), address, exc)
        try:
            self.done(object_id, address, ok)
        except Exception:
            logger.exception("object push: bookkeeping of %s failed", short(object_id))

    def stop(self) -> None:
        """Tell the watcher thread to end (it notices within 0.2 s); :meth:`close` waits."""
        self._stop.set()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self._pool.shutdown(wait=True, cancel_futures=True)
        self.client.close()
