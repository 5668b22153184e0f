"""retry_exceptions decisions and the cancel interrupt handler, without processes."""

from __future__ import annotations

from typing import Any

import pytest

from rayfield._private.common import task_retry
from rayfield._private.runtime.interrupts import Interrupts
from rayfield.exceptions import TaskError


class AppError(Exception):
    pass


def test_check_accepts_bools_and_exception_classes() -> None:
    assert task_retry.check(True) is True and task_retry.check(False) is False
    assert task_retry.check([KeyError, AppError]) == (KeyError, AppError)
    assert task_retry.check([]) == () and task_retry.check(None) is False
    for bad in (1, "yes", [KeyError, 3], [int], (ValueError, "x")):
        with pytest.raises(TypeError, match="retry_exceptions must be"):
            task_retry.check(bad)


def test_allows_matches_the_option() -> None:
    assert task_retry.allows(AppError(), True)
    assert not task_retry.allows(AppError(), False)
    assert task_retry.allows(KeyError(), (LookupError,))  # subclasses count
    assert not task_retry.allows(AppError(), (KeyError,))
    assert not task_retry.allows(KeyboardInterrupt(), True)  # a cancel is never retried
    assert not task_retry.allows(SystemExit(), True)


def test_pack_round_trips_classes_of_main() -> None:
    local = type("LocalError", (Exception,), {})
    assert task_retry.unpack(task_retry.pack((local, KeyError))) == (local, KeyError)
    assert task_retry.unpack(True) is True


def test_wrap_of_a_task_error_keeps_the_original_class() -> None:
    first = TaskError.wrap(KeyError("k"), "a", "tb-a", 1, "n")
    second = TaskError.wrap(first, "b", "tb-b", 2, "n")
    assert isinstance(second, KeyError) and isinstance(second, TaskError)
    assert second.function_name == "b" and second.cause is first.cause


class FakeClient:
    """Answers cancel_task(query=True) from a set of cancelled task ids."""

    def __init__(self) -> None:
        self.cancelled: set[bytes] = set()
        self.queries: list[bytes] = []

    def cancel_task(self, task_id: bytes, query: bool = False) -> str:
        assert query
        self.queries.append(task_id)
        return "cancelled" if task_id in self.cancelled else "running"


def _interrupts() -> tuple[Interrupts, Any]:
    client = FakeClient()
    return Interrupts(client), client


def test_signal_interrupts_only_the_cancelled_task() -> None:
    irq, client = _interrupts()
    irq.enter(b"a")
    irq._on_signal(2, None)  # not cancelled (e.g. a late signal): nothing happens
    client.cancelled.add(b"a")
    with pytest.raises(KeyboardInterrupt):
        irq._on_signal(2, None)
    assert irq.raised_for(b"a") and not irq.raised_for(b"b")
    irq.leave()


def test_signal_outside_task_code_is_checked_when_the_next_code_starts() -> None:
    irq, client = _interrupts()
    irq._on_signal(2, None)  # between tasks: only remembered
    assert client.queries == []
    irq.enter(b"b")  # b is not the cancelled task: it runs
    assert client.queries == [b"b"] and not irq.raised_for(b"b")
    irq.leave()
    client.cancelled.add(b"c")
    irq._on_signal(2, None)
    with pytest.raises(KeyboardInterrupt):
        irq.enter(b"c")  # cancelled while its arguments were fetched
    irq._on_signal(2, None)  # after leave(): never raises
    irq.leave()
