"""Shared fixtures of rayfield-rllib's tests, from :mod:`rayfield.testing`."""

from __future__ import annotations

from typing import Any

import pytest

pytest_plugins = ["rayfield.testing"]


@pytest.fixture(scope="session")
def rayfield_known_leaks(rayfield_known_leaks: list[str]) -> list[str]:
    # Not rayfield's: torch starts its intra-op thread pool (and jemalloc its background
    # thread) in this process on first use and keeps them for the life of the process.
    return [*rayfield_known_leaks, r"^native thread "]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "slow: long-running learning or stress runs, excluded from the default suite"
    )


@pytest.fixture(scope="module")
def cluster(rayfield_module_runtime: dict[str, Any]) -> dict[str, Any]:
    """``rayfield.testing``'s module runtime (2 CPUs, a 256 MiB store, a private temp dir)
    shared by the tests of one module; shut down and checked for leaks after it."""
    return rayfield_module_runtime
