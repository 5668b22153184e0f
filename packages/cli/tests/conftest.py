"""Fixtures of every rayfield-cli test: ``rayfield.testing``'s plugin, SIGINT at its
default for the tests that send it, and the leak check of the unit tests (``unit/``: no
processes, sockets or servers), around each test. The cluster fixtures and the leak check
of the integration tests are in ``integration/conftest.py``."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest_plugins = ["rayfield.testing"]

UNIT = Path(__file__).resolve().parent / "unit"


@pytest.fixture(autouse=True)
def unit_leak_check(request: pytest.FixtureRequest) -> None:
    """A test under ``unit/`` leaves no thread, fd, child process or rayfield shared
    memory behind (``rayfield.testing``'s ``rayfield_leak_check``)."""
    if UNIT in Path(request.node.path).resolve().parents:
        request.getfixturevalue("rayfield_leak_check")


@pytest.fixture
def sigint_not_ignored() -> Iterator[None]:
    """SIGINT at Python's handler, so the commands started here begin with its default.

    A shell starts a background job with SIGINT ignored and its children inherit that (a
    test run started with ``&`` in a script): the commands these tests interrupt would
    then never see the Ctrl-C a terminal sends."""
    previous = signal.getsignal(signal.SIGINT)
    if previous is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)
