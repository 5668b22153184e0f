"""The wire format of policy serving (`PolicyServer`, `PolicyClient`): data only.

A request is an HTTP POST whose body is one JSON object (``application/json``) or one
msgpack map (``application/msgpack``), with the cluster-free serving token in the
``Authorization: Bearer`` header. Nothing is ever unpickled: numpy arrays travel as their
raw buffer with dtype and shape (JSON: ``{"__ndarray__": [dtype, shape, base64]}``;
msgpack: ext type 1 holding a msgpack ``[dtype, shape, bytes]``), and only numeric and
boolean dtypes are accepted back. The reply is an object of the same encoding; an error
reply is ``{"error": message}`` with a 4xx or 5xx status.
"""

from __future__ import annotations

import base64
import json
import math
from typing import Any

import msgpack
import numpy as np

__all__ = [
    "COMMANDS",
    "JSON",
    "MSGPACK",
    "WireError",
    "decode",
    "encode",
]

JSON = "application/json"
MSGPACK = "application/msgpack"
COMMANDS = ("START_EPISODE", "GET_ACTION", "LOG_ACTION", "LOG_RETURNS", "END_EPISODE")
_ND_EXT = 1
_INTS = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
_DTYPES = frozenset(("bool", *_INTS, "float16", "float32", "float64"))
_MAX_DEPTH = 32


class WireError(ValueError):
    """A body that is not a well-formed serving message (the server answers 400)."""


def _array(dtype: Any, shape: Any, data: bytes) -> np.ndarray:
    if not isinstance(dtype, str) or dtype not in _DTYPES:
        raise WireError(f"array dtype {dtype!r} is not one of {sorted(_DTYPES)}")
    if not isinstance(shape, list) or not all(isinstance(n, int) and n >= 0 for n in shape):
        raise WireError(f"array shape {shape!r} is not a list of sizes")
    size = math.prod(shape) * np.dtype(dtype).itemsize
    if len(data) != size:
        raise WireError(f"array of {dtype} {shape} needs {size} bytes, got {len(data)}")
    return np.frombuffer(data, dtype=dtype).reshape(shape)


def _to_plain(obj: Any, depth: int = 0) -> Any:
    """``obj`` with numpy scalars as Python numbers and tuples as lists (arrays stay)."""
    if depth > _MAX_DEPTH:
        raise WireError(f"value nested deeper than {_MAX_DEPTH} levels")
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, (list, tuple)):
        return [_to_plain(x, depth + 1) for x in obj]
    if isinstance(obj, dict):
        return {str(k): _to_plain(v, depth + 1) for k, v in obj.items()}
    return obj


def _array_parts(obj: np.ndarray) -> tuple[str, list[int], bytes]:
    """(dtype name, shape, raw bytes) of an array the wire can carry."""
    arr = np.ascontiguousarray(obj)
    if arr.dtype.name not in _DTYPES:
        raise TypeError(f"cannot send an array of dtype {arr.dtype}")
    return arr.dtype.name, list(arr.shape), arr.tobytes()


def _not_data(obj: Any) -> TypeError:
    return TypeError(f"cannot send a {type(obj).__name__}: send numbers, lists, dicts, arrays")


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.ndarray):
        dtype, shape, data = _array_parts(obj)
        return {"__ndarray__": [dtype, shape, base64.b64encode(data).decode("ascii")]}
    raise _not_data(obj)


def _json_hook(obj: dict[str, Any]) -> Any:
    if "__ndarray__" in obj:
        spec = obj["__ndarray__"]
        if len(obj) != 1 or not isinstance(spec, list) or len(spec) != 3:
            raise WireError("__ndarray__ must be [dtype, shape, base64 data] alone")
        try:
            data = base64.b64decode(spec[2], validate=True)
        except (TypeError, ValueError) as exc:
            raise WireError(f"array data is not base64: {exc}") from None
        return _array(spec[0], spec[1], data)
    return obj


def _msgpack_default(obj: Any) -> Any:
    if isinstance(obj, np.ndarray):
        return msgpack.ExtType(_ND_EXT, msgpack.packb(list(_array_parts(obj))))
    if isinstance(obj, np.generic):
        return obj.item()
    raise _not_data(obj)


def _msgpack_ext(code: int, data: bytes) -> Any:
    if code != _ND_EXT:
        raise WireError(f"unknown msgpack extension type {code}")
    spec = msgpack.unpackb(data, raw=False)
    if not isinstance(spec, list) or len(spec) != 3 or not isinstance(spec[2], bytes):
        raise WireError("an array extension must hold [dtype, shape, bytes]")
    return _array(spec[0], spec[1], spec[2])


def encode(obj: dict[str, Any], content_type: str) -> bytes:
    """``obj`` (numbers, strings, lists, dicts, numpy arrays and scalars) as a body.

    Raises:
        TypeError: ``obj`` holds something else (an object that would need pickling).
        WireError: ``content_type`` is neither :data:`JSON` nor :data:`MSGPACK`.
    """
    if content_type == MSGPACK:
        return msgpack.packb(obj, default=_msgpack_default, use_bin_type=True)
    if content_type == JSON:
        return json.dumps(_to_plain(obj), default=_json_default).encode()
    raise WireError(f"content type {content_type!r} is not {JSON} or {MSGPACK}")


def decode(body: bytes, content_type: str) -> dict[str, Any]:
    """The object in ``body``; arrays come back as read-only numpy arrays.

    Raises:
        WireError: not valid JSON/msgpack, not an object, a malformed array, or an
            unknown content type.
    """
    try:
        if content_type == MSGPACK:
            obj = msgpack.unpackb(
                body, raw=False, ext_hook=_msgpack_ext, strict_map_key=True, max_bin_len=len(body)
            )
        elif content_type == JSON:
            obj = json.loads(body, object_hook=_json_hook)
        else:
            raise WireError(f"content type {content_type!r} is not {JSON} or {MSGPACK}")
    except WireError:
        raise
    except (ValueError, TypeError, msgpack.exceptions.ExtraData, RecursionError) as exc:
        raise WireError(f"the body is not valid {content_type}: {exc}") from None
    if not isinstance(obj, dict):
        raise WireError(f"the body must be an object, got {type(obj).__name__}")
    return obj
