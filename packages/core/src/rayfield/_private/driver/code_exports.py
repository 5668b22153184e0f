"""Publishing exported code in the GCS of this process's cluster.

A process exports code into its node's store (``Runtime.export``); in a cluster it also
stores it in the GCS key-value table (``publish``), where any node finds it after the
exporting node died (``common/code.py`` has the layout and ``fetch_into``).
"""

from __future__ import annotations

import logging

from rayfield._private import context
from rayfield._private.common.code import MAX_GCS_CODE_BYTES, NAMESPACE
from rayfield._private.driver import names

__all__ = ["publish"]

logger = logging.getLogger("rayfield")


def publish(function_id: bytes, blob: bytes) -> None:
    """Store exported code in the GCS of this process's cluster; nothing outside one.

    Failures are logged, not raised: the code is in this node's store as well, where the
    other nodes find it while this node lives.
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
    try:
        names.client(address).kv_put(NAMESPACE, function_id, blob, overwrite=False)
    except Exception as exc:
        logger.warning("could not store exported code in the GCS at %s: %s", address, exc)
