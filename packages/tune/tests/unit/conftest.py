from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(autouse=True)
def _keep_cwd() -> Iterator[None]:
    """Trainables enter their trial directory; put the test's cwd back."""
    cwd = os.getcwd()
    yield
    os.chdir(cwd)
