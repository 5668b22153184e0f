"""Shared fixtures of rayfield-rllib's tests."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "slow: long-running learning or stress runs, excluded from the default suite"
    )
