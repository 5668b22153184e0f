"""Objects from other nodes into the local store: a pull's chunks or a whole object.

The object manager (``object_manager.py``) decides what to fetch and from where; this
module only copies
bytes that came over gRPC (``PullObject``'s stream, a ``PushObject`` or a
``FetchObjects`` reply) into a ``create``d buffer of the local store and seals it, or
aborts it when the copy does not complete. It also sets the process's malloc up for
transfers (:func:`keep_freed_memory`).
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Iterable
from typing import Any

from rayfield._private.common.ids import short
from rayfield._private.protocol import messages
from rayfield.store import StoreClient
from rayfield.store.errors import ObjectExistsError

logger = logging.getLogger("rayfield")

# Objects up to this size are stored with one ``put`` (their bytes go through the store's
# socket); larger ones are written into a ``create``d buffer and sealed (two requests).
PUT_MAX_BYTES = 64 << 10


def keep_freed_memory() -> None:
    """Have this process's malloc keep the buffers of object transfers when freed.

    gRPC copies each chunk of an object through several fresh buffers of megabytes;
    glibc maps such buffers anew and gives them back to the kernel when freed, so every
    chunk would page-fault again (on a two-core VM a 200 MB transfer runs at about
    0.6 GB/s that way, about 1 GB/s with the buffers kept). Buffers up to 32 MiB come from
    the heap, and up to 256 MiB of freed heap is kept. Does nothing where the C library
    is not glibc.
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 32 << 20)  # M_MMAP_THRESHOLD
        libc.mallopt(-1, 256 << 20)  # M_TRIM_THRESHOLD
    except (OSError, AttributeError):
        pass


def write_chunks(client: StoreClient, object_id: bytes, chunks: Iterable[bytes]) -> bool | None:
    """Write ``PullObject``'s chunks (``messages.decode_chunk``) into a new object of the
    local store and seal it.

    Returns:
        True when the object was stored now; None when it was here already (made or
        pulled meanwhile); False when the holder does not have it.

    Raises:
        Whatever iterating ``chunks`` raises (e.g. ``node_service.PeerError``): the partly
        written object is aborted first.
    """
    view = None
    try:
        for raw in chunks:
            found, size, meta, offset, data = messages.decode_chunk(raw)
            if view is None:
                if not found:
                    return False
                try:
                    view = client.create(object_id, size, meta)
                except ObjectExistsError:
                    return None
            view[offset : offset + len(data)] = data
        if view is None:
            return False
        client.seal(object_id)
        view = None
        return True
    finally:
        if view is not None:
            client.abort(object_id)


def store_whole(
    client: StoreClient, object_id: bytes, size: int, meta: bytes, data: Any
) -> bool | None:
    """Store an object that came whole (``data``: ``size`` bytes) and seal it: a small
    one with one ``put``, a larger one with ``create``, a copy and ``seal``.

    Returns:
        True when stored now; None when it was here already; False when the store
        would not take it (e.g. full: logged; the sender keeps its copy).
    """
    if size <= PUT_MAX_BYTES:  # one request (create, copy and seal), not two
        try:
            client.put(object_id, data, meta)
        except ObjectExistsError:
            return None
        except Exception as exc:
            logger.info("could not store object %s: %s", short(object_id), exc)
            return False
        return True
    try:
        view = client.create(object_id, size, meta)
    except ObjectExistsError:
        return None
    except Exception as exc:
        logger.info("could not store object %s: %s", short(object_id), exc)
        return False
    try:
        view[:size] = data
        client.seal(object_id)
    except BaseException:
        client.abort(object_id)
        raise
    return True
