"""How the default loggers turn results into text: ``result.json`` lines, CSV cells, and
the flattened copy of a result that the CSV and TensorBoard loggers share.

Values JSON cannot hold are written as :func:`_clean` makes them: NaN and infinities as
null, numpy values as the Python ones, other objects as their ``str``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from itertools import repeat
from json import encoder as json_encoder
from typing import Any

__all__ = ["flatten", "json_lines"]


def _clean(value: Any) -> Any:
    """JSON-safe: NaN/inf -> None, numpy -> Python, other objects -> str."""
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, (str, int, bool)) or value is None:
        return value
    if hasattr(value, "tolist"):
        return _clean(value.tolist())
    return str(value)


def _plain(value: Any) -> bool:
    """True for nested dicts/lists/tuples of str, int, float, bool and None only."""
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return all(_plain(v) for v in value)
    return value is None or type(value) in (str, int, float, bool)


def _json_default(value: Any) -> Any:
    if hasattr(value, "tolist"):  # numpy scalars and arrays
        return value.tolist()
    return str(value)


# json.dumps(result, allow_nan=False, default=_json_default), its encoder made once.
_RESULT_ENCODER = json.JSONEncoder(allow_nan=False, default=_json_default)


def _line_encoder() -> Callable[[Any, int], list[str]]:
    """The C function behind ``_RESULT_ENCODER.encode`` (which makes a new one for every
    call), made once: ``"".join(encode(value, 0))`` is ``_RESULT_ENCODER.encode(value)``.
    Without the C module, a function giving ``[_RESULT_ENCODER.encode(value)]``."""
    make = getattr(json_encoder, "c_make_encoder", None)
    if make is None:
        return lambda value, _level: [_RESULT_ENCODER.encode(value)]
    # No markers (check_circular off): one encoder serves every thread; a cycle, which
    # _clean cannot write either, raises RecursionError instead of ValueError.
    encode: Callable[[Any, int], list[str]] = make(
        None,
        _json_default,
        json_encoder.encode_basestring_ascii,
        None,
        _RESULT_ENCODER.key_separator,
        _RESULT_ENCODER.item_separator,
        False,
        False,
        False,
    )
    return encode


_ENCODE = _line_encoder()

# A config whose JSON is at least this long is encoded once per batch and put into each
# line; a shorter one costs less to encode again than the copy of the result that
# splicing takes.
_SPLICE_MIN_CHARS = 120
_MARK = "\x00rayfield-config\x00"  # the config's stand-in while a line is encoded
_MARK_JSON = '"\\u0000rayfield-config\\u0000"'  # ... and how it reads in the line


def _json_line(result: dict[str, Any]) -> str:
    """One line of ``result.json``: NaN and infinities as null (as :func:`_clean`)."""
    try:  # the common case: plain JSON values, no NaN
        return "".join(_ENCODE(result, 0))
    except (TypeError, ValueError):
        return json.dumps(_clean(result))


def json_lines(results: list[dict[str, Any]]) -> str:
    """The ``result.json`` lines of ``results``, each ending with a newline: the text of
    :func:`_json_line` for each.

    The results of one call of a trial share one ``config`` dict: a long one is encoded
    once per batch and spliced into each line.
    """
    encode = _ENCODE
    lines = []
    config: Any = None  # the last config seen, and its JSON text (None: not spliced)
    config_text: str | None = None
    try:  # the common case: plain JSON values, no NaN
        for result in results:
            value = result.get("config")
            if value is not config and type(value) is dict:
                config = value
                config_text = "".join(encode(value, 0))
                if len(config_text) < _SPLICE_MIN_CHARS:
                    config_text = None
            if value is config and config_text is not None:
                line = "".join(encode({**result, "config": _MARK}, 0))
                head, mark, tail = line.partition(_MARK_JSON)
                if mark and _MARK_JSON not in tail:  # the stand-in, once: splice
                    lines.append(head + config_text + tail)
                    continue
            lines.append("".join(encode(result, 0)))
    except (TypeError, ValueError):
        lines = [_json_line(result) for result in results]
    lines.append("")
    return "\n".join(lines)


def flatten(d: dict[str, Any], delimiter: str = "/", prefix: str = "") -> dict[str, Any]:
    """``d`` with nested dicts' keys joined by ``delimiter`` (``{"a": {"b": 1}}`` ->
    ``{"a/b": 1}``); every key a string."""
    out: dict[str, Any] = {}
    for key, value in d.items():
        name = key if not prefix and type(key) is str else f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, delimiter, name + delimiter))
        else:
            out[name] = value
    return out


def _flat_without_config(result: dict[str, Any]) -> dict[str, Any]:
    """``result`` without its ``config``, nested keys joined with ``/``."""
    # The common case, tested in C: no nested dict but the config, string keys only.
    nested = sum(map(isinstance, result.values(), repeat(dict)))
    if nested == isinstance(result.get("config"), dict):
        flat = dict(result)
        flat.pop("config", None)
        if _STR_ONLY.issuperset(map(type, flat)):
            return flat
        return {k if type(k) is str else str(k): v for k, v in flat.items()}
    return flatten({k: v for k, v in result.items() if k != "config"})


_STR_ONLY = frozenset({str})
# Cell values csv.writer writes as _cell would (floats: once their sum is finite).
_PLAIN_CELLS = frozenset({str, int, float, bool, type(None)})


def _cell(value: Any) -> Any:
    """A CSV cell: as :func:`_clean` (NaN and infinities empty), plain values at once."""
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:
        return value
    if kind is float:
        return value if math.isfinite(value) else None
    return _clean(value)
