"""Explaining serialization failures: which attribute of a value cannot be pickled.

This module is only used after pickling has already failed, never on the hot path. It walks the
object graph of the value (lists, tuples, sets, dicts, ``__dict__``, ``__slots__`` and the
variables a function closes over), tries to pickle each piece, and descends into the first piece
that fails until it reaches a piece whose children all pickle: that piece is the culprit, named
by its attribute path, e.g. ``value.model.lock``.
"""

from __future__ import annotations

import inspect
import traceback
import types
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["SerializationError", "describe_failure", "substitute_error"]

_MAX_DEPTH = 32
_MAX_CHILDREN = 10_000


class SerializationError(TypeError):
    """A value cannot be serialized, or serialized data cannot be read.

    For a value that cannot be pickled, the message names the attribute path to the offending
    object and its type, e.g. ``cannot serialize value.model.lock (a _thread.lock): cannot
    pickle '_thread.lock' object``. The original pickling error is the ``__cause__``.

    Attributes:
        path: the attribute path to the offending object (``"value"`` for the value itself), or
            ``None`` when the error is not about an unpicklable value (unknown metadata tag,
            corrupt data).
    """

    def __init__(self, message: str, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path


def type_name(obj: object) -> str:
    """Return ``module.QualName`` of the type of ``obj`` (no module for builtins)."""
    cls = type(obj)
    module = getattr(cls, "__module__", None)
    qualname = getattr(cls, "__qualname__", cls.__name__)
    return qualname if module in (None, "builtins") else f"{module}.{qualname}"


def _children(obj: Any, path: str) -> Iterator[tuple[str, Any]]:
    """Yield ``(path, child)`` for the pieces a pickler would serialize along with ``obj``."""
    if isinstance(obj, (list, tuple)):
        for i, item in enumerate(obj):
            yield f"{path}[{i}]", item
    elif isinstance(obj, (set, frozenset)):
        for item in obj:
            yield f"{path}{{{item!r:.40}}}", item
    elif isinstance(obj, dict):
        for key, item in obj.items():
            yield f"{path}.<key {key!r:.40}>", key
            yield f"{path}[{key!r:.60}]", item
    if isinstance(obj, types.FunctionType):
        try:
            closure = inspect.getclosurevars(obj)
        except (TypeError, ValueError):
            return
        for name, item in {**closure.nonlocals, **closure.globals}.items():
            yield f"{path}.<{'nonlocal' if name in closure.nonlocals else 'global'} {name}>", item
        return
    attrs = getattr(obj, "__dict__", None)
    if isinstance(attrs, dict) and not isinstance(obj, type):
        for name, item in attrs.items():
            yield f"{path}.{name}", item
    for cls in type(obj).__mro__:
        slots = cls.__dict__.get("__slots__", ())
        for name in (slots,) if isinstance(slots, str) else slots:
            if name in ("__dict__", "__weakref__") or not hasattr(obj, name):
                continue
            yield f"{path}.{name}", getattr(obj, name)


def _culprit(
    obj: Any,
    path: str,
    error: BaseException,
    probe: Callable[[Any], None],
    seen: set[int],
    depth: int,
) -> tuple[str, Any, BaseException]:
    """Descend from ``obj`` (known to fail with ``error``) to the first failing leaf."""
    seen.add(id(obj))
    if depth >= _MAX_DEPTH:
        return path, obj, error
    try:
        children = _children(obj, path)
        for count, (child_path, child) in enumerate(children):
            if count >= _MAX_CHILDREN:
                break
            if id(child) in seen:
                continue
            try:
                probe(child)
            except Exception as child_error:
                return _culprit(child, child_path, child_error, probe, seen, depth + 1)
    except Exception:  # a misbehaving __getattr__ or __repr__: stop here
        pass
    return path, obj, error


def describe_failure(
    value: Any, error: BaseException, probe: Callable[[Any], None], root: str = "value"
) -> SerializationError:
    """Build a :class:`SerializationError` naming the attribute path to the unpicklable piece.

    Args:
        value: the value whose serialization failed.
        error: the exception raised when pickling ``value``.
        probe: pickles one object with the same pickler as the failed attempt and raises if it
            cannot (its output is discarded).
        root: the name given to ``value`` at the start of the path.

    Returns:
        The error to raise (``raise describe_failure(...) from error``).
    """
    path, culprit, leaf_error = _culprit(value, root, error, probe, set(), 0)
    message = f"cannot serialize {path} (a {type_name(culprit)}): {leaf_error}"
    return SerializationError(message, path)


def substitute_error(exc: BaseException) -> RuntimeError:
    """Return a picklable stand-in for ``exc``: its type name, message and formatted traceback."""
    try:
        message = str(exc)
    except Exception:
        message = "<str() failed>"
    trace = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return RuntimeError(f"{type_name(exc)}: {message}\n\n{trace}")
