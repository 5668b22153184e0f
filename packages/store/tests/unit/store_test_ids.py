"""Readable 20-byte ids for the state-machine unit tests (scheduler, task manager)."""

from __future__ import annotations


def tid(n: int, tag: bytes = b"t") -> bytes:
    """A 20-byte id, distinct per (tag, n)."""
    return tag + n.to_bytes(19, "big")


def oid(n: int) -> bytes:
    return tid(n, b"o")


def aid(n: int) -> bytes:
    return tid(n, b"a")


def cid(n: int) -> bytes:
    return tid(n, b"c")
