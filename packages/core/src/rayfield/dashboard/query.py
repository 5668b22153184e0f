"""Checks of the dashboard API's query parameters, free of any web framework.

Every query parameter of ``/api/...`` is parsed here. A value that is malformed or out
of its range raises :class:`QueryError`, which the API answers with 400 and
``{"error": message}``; nothing unchecked reaches the cluster's messages (whose integer
fields are 32- or 64-bit).

Parameters: ``/api/tasks?recent=N``; ``/api/log?node=ADDRESS&name=FILE&offset=N&
max_bytes=N``; ``/api/timeline?limit=N&download=0|1``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["INTS", "IntRange", "QueryError", "flag", "integer", "log_file"]

INT64_MAX = 2**63 - 1
UINT32_MAX = 2**32 - 1
_INTEGER = re.compile(r"-?[0-9]+")
_FLAGS = {"": False, "0": False, "false": False, "no": False, "1": True, "true": True, "yes": True}


class QueryError(ValueError):
    """A query parameter is malformed or out of range; the message says which and why."""


@dataclass(frozen=True)
class IntRange:
    """The valid values of an integer parameter: ``low <= value <= high``."""

    low: int
    high: int
    meaning: str


INTS: dict[str, IntRange] = {
    "recent": IntRange(0, 1_000_000, "how many finished tasks to list"),
    "offset": IntRange(-INT64_MAX, INT64_MAX, "a byte offset (negative: from the end)"),
    "max_bytes": IntRange(1, INT64_MAX, "bytes to read (more than 1 MiB reads 1 MiB)"),
    "limit": IntRange(0, UINT32_MAX, "how many of the newest events (0: all kept)"),
}


def integer(query: Mapping[str, str], name: str, default: int) -> int:
    """The integer parameter ``name`` of ``query`` (``default`` when absent or empty).

    Args:
        query: the request's query parameters.
        name: a key of :data:`INTS`, whose range the value must be in.
        default: the value when the parameter is absent or empty.

    Raises:
        QueryError: not a plain decimal integer (signs other than a leading ``-``,
            spaces, underscores and non-ASCII digits included), or outside its range.
    """
    raw = query.get(name)
    if raw is None or raw == "":
        return default
    bounds = INTS[name]
    if not _INTEGER.fullmatch(raw):
        raise QueryError(f"{name} must be a decimal integer ({bounds.meaning}), not {raw[:40]!r}")
    value = int(raw) if len(raw) <= 40 else None  # longer ones are out of range anyway
    if value is None or not bounds.low <= value <= bounds.high:
        raise QueryError(
            f"{name} must be between {bounds.low} and {bounds.high} ({bounds.meaning}), "
            f"not {raw[:40]}"
        )
    return value


def flag(query: Mapping[str, str], name: str) -> bool:
    """A yes/no parameter: ``1``/``true``/``yes`` or ``0``/``false``/``no`` (absent: no).

    Raises:
        QueryError: any other value.
    """
    raw = query.get(name, "")
    if raw.lower() not in _FLAGS:
        raise QueryError(f"{name} must be 0 or 1, not {raw[:40]!r}")
    return _FLAGS[raw.lower()]


def log_file(query: Mapping[str, str]) -> tuple[str, str]:
    """``(node, name)`` of ``/api/log``: a node address and a bare log file name.

    Raises:
        QueryError: either is missing, or the name is not a bare file name (a path, a
            hidden file, a NUL byte, longer than 255 characters).
    """
    node, name = query.get("node", ""), query.get("name", "")
    if not node or not name:
        raise QueryError("give node=ADDRESS and name=FILE (a bare name)")
    if "/" in name or "\0" in name or name.startswith(".") or len(name) > 255:
        raise QueryError(f"name must be a bare log file name, not {name[:40]!r}")
    if len(node) > 300 or "\0" in node:
        raise QueryError(f"node must be a node's address or id, not {node[:40]!r}")
    return node, name
