"""Publishing exported code in the GCS of this process's cluster.

A process exports code into its node's store (``Runtime.export``); in a cluster it also
stores it in the GCS key-value table (``publish``), where any node finds it after the
exporting node died (``common/code.py`` has the layout and ``fetch_into``).

``publish`` tries the GCS once; while the GCS is unreachable (being restarted) the code
is handed to a background thread that stores it as soon as the GCS answers again, so a
``.remote()`` call never waits for a GCS that is down. Meanwhile the other nodes pull
the code from this node's store.
"""

from __future__ import annotations

import logging
import threading
import time

from rayfield._private import context
from rayfield._private.common.code import MAX_GCS_CODE_BYTES, NAMESPACE
from rayfield._private.driver import names
from rayfield._private.protocol.errors import GcsUnavailableError

__all__ = ["publish"]

logger = logging.getLogger("rayfield")

RETRY_S = 1.0  # between tries of the code waiting for the GCS

_lock = threading.Lock()
_waiting: list[tuple[str, bytes, bytes]] = []  # (GCS address, code id, code) to store
_thread: threading.Thread | None = None


def publish(function_id: bytes, blob: bytes) -> None:
    """Store exported code in the GCS of this process's cluster; nothing outside one.

    Failures are logged, not raised: the code is in this node's store as well, where the
    other nodes find it while this node lives. Code the GCS did not answer for is stored
    in the background once it does.
    """
    address = context.gcs_address()
    if address is None:
        return
    if len(blob) > MAX_GCS_CODE_BYTES:
        logger.warning(
            "exported code %s is %.1f MiB, over the %d MiB the GCS keeps: other nodes fetch "
            "it from this node only, so it is lost if this node dies. Pass big data as "
            "rayfield.put() refs instead of capturing it in the function or class.",
            function_id.hex(),
            len(blob) / 2**20,
            MAX_GCS_CODE_BYTES >> 20,
        )
        return
    gcs = names.client(address)
    try:
        gcs.with_limits(gcs.timeout_s, retry_deadline_s=0.0).kv_put(
            NAMESPACE, function_id, blob, overwrite=False
        )
    except GcsUnavailableError as exc:
        logger.info("GCS unreachable, code %s is stored there later: %s", function_id.hex(), exc)
        _later(address, function_id, blob)
    except Exception as exc:
        logger.warning("could not store exported code in the GCS at %s: %s", address, exc)


def _later(address: str, function_id: bytes, blob: bytes) -> None:
    global _thread
    with _lock:
        _waiting.append((address, function_id, blob))
        if _thread is None:  # (the thread clears it, under the lock, as it ends)
            _thread = threading.Thread(target=_store_waiting, daemon=True, name="rayfield-code")
            _thread.start()


def _store_waiting() -> None:
    """Store the waiting code, oldest first, trying again every ``RETRY_S`` while the
    GCS is unreachable; ends when none waits."""
    global _thread
    while True:
        with _lock:
            if not _waiting:
                _thread = None
                return
            address, function_id, blob = _waiting[0]
        gcs = names.client(address)
        try:
            gcs.with_limits(gcs.timeout_s, retry_deadline_s=0.0).kv_put(
                NAMESPACE, function_id, blob, overwrite=False
            )
        except GcsUnavailableError:
            time.sleep(RETRY_S)
            continue
        except Exception as exc:
            logger.warning("could not store exported code in the GCS at %s: %s", address, exc)
        with _lock:
            _waiting.pop(0)
