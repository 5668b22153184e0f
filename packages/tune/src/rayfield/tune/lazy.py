"""Module attributes imported on first use (PEP 562), to keep package imports light."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["lazy_getattr"]


def lazy_getattr(package: str, table: dict[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package`` that imports ``table[name]`` on first use.

    ``table`` maps an attribute to ``"module"`` (the attribute is that module) or
    ``"module:attr"``; the value is cached in the package's namespace.
    """

    def __getattr__(name: str) -> Any:
        target = table.get(name)
        if target is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, _, attr = target.partition(":")
        value = importlib.import_module(module)
        if attr:
            value = getattr(value, attr)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__
