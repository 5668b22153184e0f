"""Which node made an id: the id layout the node manager reads.

Every object, task and actor id starts with ``ORIGIN_BYTES`` bytes of the id of the node
whose process made it (code ids start with ``code_exports.CODE_ORIGIN`` instead), so a
node tells where an object was made, and which node is an actor's home, from the id alone.
"""

from __future__ import annotations

__all__ = ["ORIGIN_BYTES", "origin_of"]

ORIGIN_BYTES = 6


def origin_of(object_id: bytes) -> bytes:
    """The first ``ORIGIN_BYTES`` bytes of ``object_id``: those of the node id of the
    process that made it."""
    return object_id[:ORIGIN_BYTES]
