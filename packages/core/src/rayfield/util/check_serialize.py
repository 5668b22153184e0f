"""`inspect_serializability`: which pieces of a value cannot be sent to a task, an actor or
the object store, found before the value is sent (Ray's ``ray.util.inspect_serializability``).

It pickles the value as rayfield does (cloudpickle with rayfield's reducers). When that fails,
it tries each piece the pickler would take along (items of lists, tuples, sets and dicts,
attributes in ``__dict__`` and ``__slots__``, the variables a function closes over), descends
into those that fail, and reports every failing piece none of whose own pieces fail, up to
``depth`` levels down.
"""

from __future__ import annotations

import sys
from typing import IO, Any

from rayfield._private.common.serialization import _probe
from rayfield._private.common.serialization_errors import _MAX_CHILDREN, _children, type_name

__all__ = ["FailureTuple", "inspect_serializability"]


class FailureTuple:
    """A piece of the inspected value that cannot be serialized.

    Attributes:
        obj: the piece itself.
        name: its path from the inspected value, e.g. ``value.model.lock``.
        parent: the object it was found in (None for the inspected value itself).

    Two are equal when they name the same object at the same path.
    """

    __slots__ = ("name", "obj", "parent")

    def __init__(self, obj: Any, name: str, parent: Any) -> None:
        self.obj = obj
        self.name = name
        self.parent = parent

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FailureTuple) and other.obj is self.obj and other.name == self.name

    def __hash__(self) -> int:
        return hash((id(self.obj), self.name))

    def __repr__(self) -> str:
        obj, parent = type_name(self.obj), type_name(self.parent)
        return f"FailureTuple({self.name} [obj={obj}, parent={parent}])"


def inspect_serializability(
    base_obj: Any, name: str | None = None, depth: int = 3, print_file: IO[str] | None = None
) -> tuple[bool, set[FailureTuple]]:
    """Whether ``base_obj`` can be serialized, and if not, which of its pieces cannot.

    Prints a report, one line per failing piece, indented by its level, e.g.::

        fn failed: cannot pickle '_thread.lock' object
            fn.<nonlocal model> (a Model) failed: cannot pickle '_thread.lock' object
                fn.<nonlocal model>.lock (a _thread.lock) failed: ...

    Args:
        base_obj: the value to check (a function, a class, an instance, a container...).
        name: its name in the report (default: its ``__name__``, else its type's name).
        depth: how many levels below ``base_obj`` to search (0: only ``base_obj``). A
            failing piece at the last level is reported as it is.
        print_file: where the report goes (default ``sys.stdout``).

    Returns:
        ``(serializable, failures)``: failures are the failing pieces none of whose own
        pieces (within ``depth``) fail; empty when ``base_obj`` serializes.

    Raises:
        ValueError: ``depth`` is negative.
    """
    if depth < 0:
        raise ValueError(f"depth must be >= 0, got {depth}")
    out = sys.stdout if print_file is None else print_file
    root = name or getattr(base_obj, "__name__", None) or type_name(base_obj)
    failures: set[FailureTuple] = set()
    ok = _inspect(base_obj, str(root), None, depth, 0, failures, out, set())
    if ok:
        print(f"{root} is serializable", file=out)
    return ok, failures


def _inspect(
    obj: Any,
    path: str,
    parent: Any,
    depth: int,
    level: int,
    failures: set[FailureTuple],
    out: IO[str],
    seen: set[int],
) -> bool:
    """Whether ``obj`` serializes; if not, report it and look into its pieces."""
    try:
        _probe(obj)
        return True
    except Exception as exc:  # any pickling error: that is what is being inspected
        error = exc
    what = "" if level == 0 else f" (a {type_name(obj)})"
    print(f"{'    ' * level}{path}{what} failed: {error}", file=out)
    seen.add(id(obj))
    found = False
    if level < depth:
        try:
            for count, (child_path, child) in enumerate(_children(obj, path)):
                if count >= _MAX_CHILDREN:
                    break
                if id(child) in seen:
                    continue
                if not _inspect(child, child_path, obj, depth, level + 1, failures, out, seen):
                    found = True
        except Exception:  # a misbehaving __getattr__ or __repr__: report obj itself
            pass
    if not found:
        failures.add(FailureTuple(obj, path, parent))
    return False
