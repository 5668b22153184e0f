"""Code packing: exported functions and classes, their ids, and their copies in the GCS.

A process exports a remote function or actor class once (``Runtime.export``): the
cloudpickled code goes into its node's store under a *code id*, which is
``CODE_ORIGIN`` followed by 14 bytes of the SHA-1 of the code, so the same code always
gets the same id and any node can tell a code id from an object id (object ids start
with 6 bytes of the id of the node that made them). In a cluster the process also
stores the code in the GCS key-value table, namespace ``functions``, under the code id
(``driver/code_exports.publish``). A node that needs code it lacks (a worker loads the
function of a task forwarded there) reads it from the GCS first (``fetch_into``) and
only then asks the other nodes; so a task or an actor restart still finds its code after
the exporting node died. While the GCS does not answer, the nodes are asked at once.

The GCS keeps code up to ``MAX_GCS_CODE_BYTES``; larger code (a function that closes
over a big array) travels between nodes like any object and is lost with its node: put
big data with ``rayfield.put`` and pass the ref instead. The GCS table is persistent
and keyed by content, so re-exports of unchanged code add nothing.

Exported code carries the exporting process's module search path (``pack``), which a
worker appends to its own before it unpickles the code (``unpack``): code that imports
modules next to the driver's script (``import mymodel``) runs on nodes started from
another directory, as it does in Ray.
"""

from __future__ import annotations

import hashlib
import logging
import os
import pickle
import sys
from typing import Any

import cloudpickle

__all__ = [
    "CODE_ORIGIN",
    "NAMESPACE",
    "code_id",
    "fetch_into",
    "is_code",
    "pack",
    "unpack",
]

logger = logging.getLogger("rayfield")

CODE_ORIGIN = b"\x00CODE\x00"
"""The first 6 bytes of every code id (``ids.ORIGIN_BYTES`` long)."""
NAMESPACE = "functions"
MAX_GCS_CODE_BYTES = 16 << 20
CODE_META = b"CODE"


def pack(obj: Any) -> bytes:
    """``obj`` (a function, class or tuple of them) cloudpickled, with this process's
    module search path (its existing folders, absolute)."""
    search_path = [os.path.abspath(p or os.getcwd()) for p in sys.path]
    search_path = list(dict.fromkeys(p for p in search_path if os.path.isdir(p)))
    return pickle.dumps((search_path, cloudpickle.dumps(obj, protocol=5)), protocol=5)


def unpack(blob: bytes) -> Any:
    """The code ``pack`` made; folders of its search path this process lacks are added
    to the end of ``sys.path`` first (so they never shadow the worker's own modules)."""
    search_path, code = pickle.loads(blob)
    for folder in search_path:
        if folder not in sys.path:
            sys.path.append(folder)
    return cloudpickle.loads(code)


def code_id(blob: bytes) -> bytes:
    """The 20-byte id of the code ``blob``: ``CODE_ORIGIN`` + 14 bytes of its SHA-1."""
    return CODE_ORIGIN + hashlib.sha1(blob).digest()[: 20 - len(CODE_ORIGIN)]


def is_code(object_id: bytes) -> bool:
    """Whether ``object_id`` names exported code rather than an object."""
    return object_id[: len(CODE_ORIGIN)] == CODE_ORIGIN


def fetch_into(gcs: Any, store: Any, function_id: bytes) -> bool | None:
    """Copy the code ``function_id`` from the GCS (client ``gcs``) into the local store
    (client ``store``).

    Returns:
        True when it is in the store now; False when the GCS does not hold it; None when
        the GCS call failed (unreachable: the caller asks the other nodes instead).
    """
    from rayfield.store.errors import ObjectExistsError

    try:
        blob = gcs.kv_get(NAMESPACE, function_id)
    except Exception as exc:
        logger.info("reading code %s from the GCS failed: %s", function_id.hex(), exc)
        return None
    if blob is None:
        return False
    try:
        store.put(function_id, blob, CODE_META)
    except ObjectExistsError:
        pass  # pulled or exported here meanwhile
    return True
