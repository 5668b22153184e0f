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

import google_crc32c

__all__ = ["crc32c", "encode_event", "record", "scalar_prefix", "scalars_record"]


def crc32c(data: bytes) -> int:
    """The CRC-32C (Castagnoli) of ``data``, the checksum of TFRecord files, computed by
    ``google-crc32c`` (its C implementation; about 0.3 us for a 100-byte record)."""
    return int(google_crc32c.value(data))


_MASK = struct.Struct("<I")


def _masked(data: bytes) -> bytes:
    """The CRC-32C of ``data`` as TFRecord stores it: rotated, offset, little-endian."""
    crc = crc32c(data)
    return _MASK.pack((((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF)


_ONE_BYTE = [bytes((n,)) for n in range(0x80)]  # the varints of 0-127: one byte each


def _varint(value: int) -> bytes:
    if 0 <= value < 0x80:
        return _ONE_BYTE[value]
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


_FLOAT = struct.Struct("<f")
_DOUBLE = struct.Struct("<d")


def scalar_prefix(tag: str) -> bytes:
    """The bytes of a ``Summary.Value`` with ``tag`` up to its 4-byte float: the caller
    appends the value (``encode_event(..., values=prefix + pack("<f", v) ...)``)."""
    tag_field = _field(1, tag.encode())
    inner_length = len(tag_field) + 5  # the tag, the float's key byte and the float
    return _varint(1 << 3 | 2) + _varint(inner_length) + tag_field + b"\x15"


def encode_event(
    wall_time: float,
    step: int = 0,
    scalars: Iterable[tuple[str, float]] = (),
    file_version: str | None = None,
    values: bytes = b"",
) -> bytes:
    """A serialized ``Event`` with one ``simple_value`` per ``(tag, value)`` of ``scalars``
    (and ``values``: ``Summary.Value`` fields already encoded, see :func:`scalar_prefix`)."""
    out = b"\x09" + _DOUBLE.pack(wall_time)
    if step:
        out += b"\x10" + _varint(step)
    if file_version is not None:
        out += _field(3, file_version.encode())
    values += b"".join(scalar_prefix(tag) + _FLOAT.pack(value) for tag, value in scalars)
    if values:
        out += _field(5, values)
    return out


_HEADERS: dict[int, bytes] = {}  # record length -> its length field and that field's CRC


def record(data: bytes) -> bytes:
    """``data`` framed as one TFRecord."""
    header = _HEADERS.get(len(data))
    if header is None:
        length = struct.pack("<Q", len(data))
        header = length + _masked(length)
        if len(_HEADERS) < 4096:
            _HEADERS[len(data)] = header
    return header + data + _masked(data)


def scalars_record(wall_time: float, step: int, values: bytes) -> bytes:
    """``record(encode_event(wall_time, step, values=values))`` for a non-empty ``values``,
    with the event built in one join (one record per result of a trial)."""
    step_field = b"" if not step else b"\x10" + _varint(step)
    # field 1 (wall_time, double), field 2 (step), field 5 (summary, length-delimited)
    parts = (b"\x09", _DOUBLE.pack(wall_time), step_field, b"\x2a", _varint(len(values)), values)
    return record(b"".join(parts))
