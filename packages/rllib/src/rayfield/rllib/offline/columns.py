"""The file format of offline data: a batch as one JSON object, and back.

A `SampleBatch` is written as ``{"type": "SampleBatch", <column>: <value>, ...}`` and a
`MultiAgentBatch` as ``{"type": "MultiAgentBatch", "count": <env steps>,
"policy_batches": {<policy id>: {<column>: <value>, ...}}}``, as RLlib's JSON files. A
column's value is either

* plain JSON: nested lists of numbers or booleans (``ndarray.tolist()``), or a list of
  JSON objects for ``infos``; or
* a packed array (the columns of ``output_compress_columns``):
  ``{"codec": "lz4" | "zlib" | "raw", "dtype": "<f4", "shape": [rows, ...],
  "data": <base64 of the compressed little-endian bytes>}``. RLlib packs a column the
  same way (compressed, then base64) but serializes it with pickle first; here the
  bytes are the array's raw buffer, described by ``dtype`` and ``shape``.

Nothing is unpickled: a packed array may only hold booleans, integers or floats, its
``shape`` must match the decompressed size exactly (the decompressor is told the
expected size, so a crafted file cannot make it allocate more), and every column of a
batch must have the same number of rows. What breaks these rules raises
`OfflineDataError`, which names the file and line.

Sources:
    RLlib 0.7, "Working with Offline Datasets" (the reference's JSON batch format,
    ``output_compress_columns``).
"""

from __future__ import annotations

import base64
import math
import zlib
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from rayfield.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch

__all__ = ["CODECS", "OfflineDataError", "decode_batch", "encode_batch", "pack", "unpack"]

CODECS = ("lz4", "zlib", "raw")
_KINDS = "biuf"  # bool, signed and unsigned integers, floats
MAX_ARRAY_BYTES = 1 << 31  # 2 GiB: a larger packed column is refused before it is decoded


class OfflineDataError(ValueError):
    """Offline data that cannot be read: bad JSON, an unknown batch type, a packed
    column whose dtype, shape or size is wrong, columns of different lengths.

    Attributes:
        where: ``"<file>:<line>"`` (or another description of the source).
    """

    def __init__(self, where: str, problem: str) -> None:
        super().__init__(f"{where}: {problem}")
        self.where = where


def pack(array: np.ndarray, codec: str = "lz4") -> dict[str, Any]:
    """A numeric array as a packed column (see the module docstring).

    Raises:
        ValueError: an unknown codec, or an array that is not bool/int/float.
    """
    if codec not in CODECS:
        raise ValueError(f"unknown codec {codec!r}: use one of {', '.join(CODECS)}")
    arr = np.ascontiguousarray(array)
    if arr.dtype.kind not in _KINDS:
        raise ValueError(f"only bool, int and float arrays can be packed, got {arr.dtype}")
    raw = arr.astype(arr.dtype.newbyteorder("<"), copy=False).tobytes()
    if codec == "lz4":
        import lz4.block

        data = lz4.block.compress(raw, store_size=False)
    elif codec == "zlib":
        data = zlib.compress(raw)
    else:
        data = raw
    return {
        "codec": codec,
        "dtype": arr.dtype.newbyteorder("<").str,
        "shape": list(arr.shape),
        "data": base64.b64encode(data).decode("ascii"),
    }


def unpack(obj: Mapping[str, Any], where: str = "<packed column>") -> np.ndarray:
    """The array of a packed column.

    Raises:
        OfflineDataError: unknown codec or dtype, a bad shape, or data whose
            decompressed size is not ``prod(shape) * itemsize``.
    """
    codec = obj.get("codec")
    if codec not in CODECS:
        raise OfflineDataError(where, f"unknown codec {codec!r} (known: {', '.join(CODECS)})")
    try:
        dtype = np.dtype(str(obj.get("dtype")))
    except TypeError:
        raise OfflineDataError(where, f"unknown dtype {obj.get('dtype')!r}") from None
    if dtype.kind not in _KINDS:
        raise OfflineDataError(where, f"dtype {dtype} is not bool, int or float")
    shape = obj.get("shape")
    if not isinstance(shape, list) or not all(
        isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape
    ):
        raise OfflineDataError(where, f"shape must be a list of non-negative ints, got {shape!r}")
    expected = math.prod(shape) * dtype.itemsize
    if expected > MAX_ARRAY_BYTES:
        raise OfflineDataError(where, f"shape {shape} of {dtype} is over 2 GiB")
    try:
        data = base64.b64decode(str(obj.get("data", "")), validate=True)
    except ValueError:
        raise OfflineDataError(where, "data is not valid base64") from None
    try:
        if codec == "lz4":
            import lz4.block

            raw = lz4.block.decompress(data, uncompressed_size=expected) if expected else b""
        elif codec == "zlib":
            inflater = zlib.decompressobj()
            raw = inflater.decompress(data, expected + 1)
        else:
            raw = data
    except Exception as exc:  # lz4.block.LZ4BlockError, zlib.error
        raise OfflineDataError(where, f"{codec} data does not decompress: {exc}") from None
    if len(raw) != expected:
        raise OfflineDataError(
            where, f"data holds {len(raw)} bytes, shape {shape} of {dtype} needs {expected}"
        )
    return np.frombuffer(raw, dtype=dtype).reshape(shape).astype(dtype.newbyteorder("="))


def _encode_column(name: str, value: np.ndarray, compress: set[str], codec: str) -> Any:
    if value.dtype == object:
        from rayfield.rllib.agents.checkpoints import to_json_safe

        return [to_json_safe(v) for v in value.tolist()]
    if name in compress and value.dtype.kind in _KINDS:
        return pack(value, codec)
    return value.tolist()


def _encode_columns(batch: SampleBatch, compress: set[str], codec: str) -> dict[str, Any]:
    return {k: _encode_column(k, v, compress, codec) for k, v in batch.items()}


def encode_batch(
    batch: SampleBatch | MultiAgentBatch,
    compress_columns: Iterable[str] = ("obs", "new_obs"),
    codec: str = "lz4",
) -> dict[str, Any]:
    """A batch as a JSON-able dict (one line of a JSON file).

    Args:
        compress_columns: columns to pack (numeric ones only; others stay lists).
        codec: ``"lz4"`` (default, as RLlib), ``"zlib"`` or ``"raw"``.

    Raises:
        TypeError: `batch` is neither a `SampleBatch` nor a `MultiAgentBatch`.
    """
    compress = set(compress_columns)
    if isinstance(batch, MultiAgentBatch):
        return {
            "type": "MultiAgentBatch",
            "count": batch.count,
            "policy_batches": {
                str(pid): _encode_columns(b, compress, codec)
                for pid, b in batch.policy_batches.items()
            },
        }
    if isinstance(batch, SampleBatch):
        return {"type": "SampleBatch", **_encode_columns(batch, compress, codec)}
    raise TypeError(f"expected a SampleBatch or MultiAgentBatch, got {type(batch).__name__}")


def _decode_column(name: str, value: Any, where: str) -> np.ndarray:
    if isinstance(value, dict):
        return unpack(value, f"{where}: column {name!r}")
    if isinstance(value, str):
        raise OfflineDataError(
            where,
            f"column {name!r} is a string: a column written by RLlib's own packer (pickle) "
            "cannot be read; write it as a list or a packed array",
        )
    if not isinstance(value, list):
        raise OfflineDataError(where, f"column {name!r} must be a list, got {type(value).__name__}")
    if value and isinstance(value[0], dict):  # infos
        out = np.empty(len(value), dtype=object)
        out[:] = value
        return out
    try:
        arr = np.asarray(value)
    except ValueError as exc:  # ragged rows
        raise OfflineDataError(
            where, f"column {name!r} has rows of different shapes: {exc}"
        ) from None
    if arr.dtype.kind not in _KINDS:
        raise OfflineDataError(
            where, f"column {name!r} must hold numbers, got values of type {arr.dtype}"
        )
    if arr.dtype == np.float64:
        arr = arr.astype(np.float32)
    return arr


def _decode_columns(columns: Mapping[str, Any], where: str) -> SampleBatch:
    cols = {str(k): _decode_column(str(k), v, where) for k, v in columns.items()}
    lengths = {k: len(v) for k, v in cols.items()}
    if len(set(lengths.values())) > 1:
        raise OfflineDataError(where, f"columns have different numbers of rows: {lengths}")
    return SampleBatch(cols)


def decode_batch(obj: Any, where: str) -> SampleBatch | MultiAgentBatch:
    """The batch of one decoded JSON line (see `encode_batch`).

    Args:
        where: names the source in errors (``"<file>:<line>"``).

    Raises:
        OfflineDataError: not an object, an unknown ``type``, or a bad column.
    """
    if not isinstance(obj, dict):
        raise OfflineDataError(where, f"expected a JSON object, got {type(obj).__name__}")
    kind = obj.get("type", "SampleBatch")
    if kind == "SampleBatch":
        return _decode_columns({k: v for k, v in obj.items() if k != "type"}, where)
    if kind == "MultiAgentBatch":
        policies = obj.get("policy_batches")
        count = obj.get("count")
        if not isinstance(policies, dict) or not isinstance(count, int) or count < 0:
            raise OfflineDataError(
                where, "a MultiAgentBatch needs 'count' (an int >= 0) and 'policy_batches' (object)"
            )
        batches = {}
        for pid, cols in policies.items():
            if not isinstance(cols, dict):
                raise OfflineDataError(where, f"policy_batches[{pid!r}] must be an object")
            batches[pid] = _decode_columns(cols, f"{where}: policy {pid!r}")
        return MultiAgentBatch(batches, count)
    raise OfflineDataError(
        where, f"unknown batch type {kind!r} (expected 'SampleBatch' or 'MultiAgentBatch')"
    )
