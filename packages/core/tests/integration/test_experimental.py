"""The experimental signal API and the asyncio integration."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

import rayfield as rf
from rayfield.experimental import async_api, signal
from rayfield.testing import wait_for


class Progress(signal.Signal):
    def __init__(self, value: int) -> None:
        self.value = value


@rf.remote
def reporter(n: int) -> str:
    for i in range(n):
        signal.send(Progress(i))
    return "done"


@rf.remote
class Emitter:
    def emit(self, value: int) -> None:
        signal.send(Progress(value))

    def fail(self) -> None:
        raise RuntimeError("actor method failed")


def test_signals_from_tasks_and_actors(cluster: Any) -> None:
    ref = reporter.remote(3)
    assert rf.get(ref) == "done"
    got = signal.receive([ref], timeout=10)
    assert [s.value for _, s in got] == [0, 1, 2]
    assert all(src is ref for src, _ in got)
    assert signal.receive([ref], timeout=0.1) == []  # cursor moved past them
    signal.reset()
    assert len(signal.receive([ref], timeout=10)) == 3  # from the start again

    e = Emitter.remote()
    rf.get([e.emit.remote(1), e.emit.remote(2)])
    assert [s.value for _, s in signal.receive([e], timeout=10)] == [1, 2]
    with pytest.raises(RuntimeError):
        rf.get(e.fail.remote())
    [(_, err)] = signal.receive([e], timeout=10)
    assert isinstance(err, signal.ErrorSignal) and "actor method failed" in str(err.get_error())


def test_receive_times_out_and_send_needs_a_task(cluster: Any, tmp_path: Path) -> None:
    go = tmp_path / "go"

    @rf.remote
    def quiet(go: str) -> int:  # finishes only once the driver's receive has returned
        wait_for(lambda: os.path.exists(go), 60, "the driver's go")
        return 1

    ref = quiet.remote(str(go))
    assert signal.receive([ref], timeout=0.2) == []  # one that waited for it: 60 s, then its error
    go.touch()
    assert rf.get(ref, timeout=60) == 1
    with pytest.raises(RuntimeError, match="driver"):
        signal.send(Progress(0))


def test_await_refs_and_as_future(cluster: Any) -> None:
    @rf.remote
    def double(x: int) -> int:
        return 2 * x

    async def main() -> list[int]:
        direct = await double.remote(1)
        rest = await asyncio.gather(*[async_api.as_future(double.remote(i)) for i in range(3)])
        return [direct, *rest]

    assert asyncio.run(main()) == [2, 0, 2, 4]
    assert double.remote(5).future().result(timeout=10) == 10
