"""Shared fixtures of rayfield-rllib's tests, from :mod:`rayfield.testing`."""

from __future__ import annotations

from typing import Any

import pytest

pytest_plugins = ["rayfield.testing"]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "slow: long-running learning or stress runs, excluded from the default suite"
    )


@pytest.fixture(scope="module")
def cluster(rayfield_module_runtime: dict[str, Any]) -> dict[str, Any]:
    """``rayfield.testing``'s module runtime (2 CPUs, a 256 MiB store, a private temp dir)
    shared by the tests of one module; shut down and checked for leaks after it."""
    return rayfield_module_runtime
