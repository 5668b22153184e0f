"""TensorBoard event records, encoded here: no tensorboardX (nor torch) in the driver.

An event file is a TFRecord stream: per record, the length (uint64 LE), its masked
CRC-32C, the data, and the data's masked CRC-32C. Each record is a serialized
``tensorflow.Event`` protobuf; the fields written are ``wall_time`` (1, double),
``step`` (2, int64), ``file_version`` (3, string) and ``summary`` (5, a ``Summary``
of repeated ``Value`` (1) with ``tag`` (1, string) and ``simple_value`` (2, float)).

Importing tensorboardX imports torch when torch is installed: about 235 MB of driver
memory and seconds of import time, for a few dozen bytes per result.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

__all__ = ["crc32c", "encode_event", "record"]

_POLY = 0x82F63B78  # CRC-32C (Castagnoli), reflected


def _table() -> list[int]:
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ _POLY if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _table()


def crc32c(data: bytes) -> int:
    """The CRC-32C of ``data`` (the checksum of TFRecord files)."""
    crc = 0xFFFFFFFF
    table = _TABLE
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def _masked(data: bytes) -> bytes:
    crc = crc32c(data)
    return struct.pack("<I", (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF)


def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # int64: negative values as ten bytes, as protobuf does
    out = bytearray()
    while True:
        low = value & 0x7F
        value >>= 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def _field(number: int, data: bytes) -> bytes:
    """A length-delimited field (wire type 2)."""
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def encode_event(
    wall_time: float,
    step: int = 0,
    scalars: Iterable[tuple[str, float]] = (),
    file_version: str | None = None,
) -> bytes:
    """A serialized ``Event`` with one ``simple_value`` per ``(tag, value)`` of ``scalars``."""
    out = b"\x09" + struct.pack("<d", wall_time)
    if step:
        out += b"\x10" + _varint(step)
    if file_version is not None:
        out += _field(3, file_version.encode())
    values = b"".join(
        _field(1, _field(1, tag.encode()) + b"\x15" + struct.pack("<f", value))
        for tag, value in scalars
    )
    if values:
        out += _field(5, values)
    return out


def record(data: bytes) -> bytes:
    """``data`` framed as one TFRecord."""
    header = struct.pack("<Q", len(data))
    return header + _masked(header) + data + _masked(data)
