"""rayfield.testing's helpers without a runtime: wait_for and the leak check."""

from __future__ import annotations

import os
import re
import threading

import pytest

from rayfield.store.testing import waiting
from rayfield.testing import (
    GRPC_THREADS,
    RUNTIME_LEAKS,
    LeakCheck,
    ResourceSnapshot,
    grpc_runtime,
    wait_for,
)


def test_wait_for_returns_the_first_true_value() -> None:
    calls = iter([0, None, "", [7]])
    assert wait_for(lambda: next(calls), 5, "the list", interval=0) == [7]


class _FakeTime:
    """Stands in for the ``time`` module of ``wait_for``: sleeping moves its clock."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_wait_for_times_out_naming_what_and_the_last_value(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = _FakeTime()
    monkeypatch.setattr(waiting, "time", clock)
    with pytest.raises(TimeoutError, match=r"after 0.1 s waiting for the answer \(last value: 0\)"):
        wait_for(lambda: 0, 0.1, "the answer", interval=0.02)
    # it gives up at its timeout: five or six sleeps of 0.02 s (float sums), not fewer or more
    assert set(clock.slept) == {0.02} and 5 <= len(clock.slept) <= 6


def test_wait_for_retries_exceptions_and_chains_the_last_one() -> None:
    calls = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise KeyError("not yet")
        return "ok"

    assert wait_for(flaky, 5, interval=0) == "ok"
    with pytest.raises(TimeoutError, match=r"waiting for broken \(last error: ") as info:

        def broken() -> None:
            raise ValueError("always")

        wait_for(broken, 0.05)
    assert isinstance(info.value.__cause__, ValueError)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"predicate": 3}, TypeError, "callable"),
        ({"predicate": bool, "timeout": 0}, ValueError, "timeout must be > 0"),
        ({"predicate": bool, "interval": -1}, ValueError, "interval must be >= 0"),
    ],
)
def test_wait_for_rejects_bad_arguments(kwargs: dict, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        wait_for(**kwargs)


def test_leak_check_names_a_leftover_thread_and_passes_once_it_ends() -> None:
    check = LeakCheck(grace_s=0.2)
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait, name="left-running")
    thread.start()
    try:
        with pytest.raises(AssertionError, match="thread 'left-running'"):
            check.check()
    finally:
        stop.set()
        thread.join()
    check.check()


def test_leak_check_names_a_leftover_fd_unless_allowed() -> None:
    check = LeakCheck(grace_s=0.1)
    tolerant = LeakCheck(allow=[r"-> pipe:"], grace_s=0.1)
    read_end, write_end = os.pipe()
    try:
        with pytest.raises(AssertionError, match=rf"fd {read_end} -> pipe:"):
            check.check()
        tolerant.check()
    finally:
        os.close(read_end)
        os.close(write_end)
    check.check()


def test_snapshot_difference_is_what_is_new() -> None:
    before = ResourceSnapshot(threads=frozenset({"thread 'a' (1)"}))
    after = ResourceSnapshot(
        threads=frozenset({"thread 'a' (1)", "thread 'b' (2)"}),
        shm=frozenset({"shared memory /dev/shm/rayfield-x"}),
    )
    assert after.new_since(before) == ["shared memory /dev/shm/rayfield-x", "thread 'b' (2)"]
    assert before.new_since(after) == []


def test_runtime_leak_patterns_match_only_their_leak() -> None:
    import re

    patterns = [re.compile(p) for p in RUNTIME_LEAKS]

    def allowed(item: str) -> bool:
        return any(p.search(item) for p in patterns)

    # shutdown() closes the store client's wake-up eventfd (Client::Close), and the event
    # flusher thread stops: neither is tolerated
    assert not allowed("fd 17 -> anon_inode:[eventfd]")
    assert not allowed("thread 'rf-events' (123)")
    assert not allowed("thread 'rayfield-node' (5)")
    assert not allowed("fd 3 -> /memfd:rayfield-arena (deleted)")
    assert not allowed("fd 9 -> socket:[1234]")


def test_grpc_threads_names_only_the_threads_of_grpcs_runtime() -> None:
    pattern = re.compile(GRPC_THREADS)
    assert pattern.search("native thread 12 (event_engine)")
    assert pattern.search("native thread 13 (grpc_global_tim)")
    assert not pattern.search("native thread 12 (python)")
    assert not pattern.search("thread 'event_engine' (12)")


def test_grpc_runtime_starts_grpcs_threads_for_its_block() -> None:
    with grpc_runtime():
        threads = ResourceSnapshot.take().threads
    assert any(re.search(GRPC_THREADS, t) for t in threads), sorted(threads)
