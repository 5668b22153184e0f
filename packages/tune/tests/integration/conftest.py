"""One local rayfield cluster (2 CPUs) per test module."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

import rayfield


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    temp_dir = tmp_path_factory.mktemp("rf")
    info = rayfield.init(num_cpus=2, object_store_memory=256 << 20, temp_dir=str(temp_dir))
    try:
        yield info
    finally:
        rayfield.shutdown()


@pytest.fixture(autouse=True)
def _keep_cwd() -> Iterator[None]:
    cwd = os.getcwd()
    yield
    os.chdir(cwd)
