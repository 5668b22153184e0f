"""One local rayfield runtime (2 CPUs) per test module."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="module")
def cluster(rayfield_module_runtime: dict[str, Any]) -> dict[str, Any]:
    """``rayfield.testing``'s module runtime: 2 CPUs, a 256 MiB store, a private temp
    dir; shut down and checked for leaks after the module."""
    return rayfield_module_runtime


@pytest.fixture(autouse=True)
def _keep_cwd() -> Iterator[None]:
    cwd = os.getcwd()
    yield
    os.chdir(cwd)
