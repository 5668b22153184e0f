"""`rayfield.util.inspect_serializability`: which pieces of a value cannot be serialized."""

from __future__ import annotations

import io
import threading
from typing import Any

import pytest

from rayfield.util import FailureTuple, inspect_serializability


class Model:
    def __init__(self) -> None:
        self.weights = [1.0, 2.0]
        self.lock = threading.Lock()


class Trainer:
    def __init__(self) -> None:
        self.model = Model()
        self.name = "t"


def _run(obj: Any, **kwargs: Any) -> tuple[bool, set[FailureTuple], str]:
    out = io.StringIO()
    ok, failures = inspect_serializability(obj, print_file=out, **kwargs)
    return ok, failures, out.getvalue()


def test_a_serializable_value_has_no_failures() -> None:
    ok, failures, report = _run({"a": [1, 2], "f": len}, name="config")
    assert ok and failures == set()
    assert report == "config is serializable\n"


def test_the_lock_deep_in_an_instance_is_the_one_failure() -> None:
    trainer = Trainer()
    ok, failures, report = _run(trainer, name="trainer")
    assert not ok
    assert failures == {FailureTuple(trainer.model.lock, "trainer.model.lock", trainer.model)}
    (failure,) = failures
    assert failure.parent is trainer.model
    lines = report.splitlines()
    assert lines[0].startswith("trainer failed:")
    assert lines[1].startswith("    trainer.model (a ") and "Model) failed" in lines[1]
    assert lines[2].startswith("        trainer.model.lock (a _thread.lock) failed")
    assert len(lines) == 3  # weights and name serialize: not reported


def test_a_closure_names_the_captured_variable() -> None:
    lock = threading.Lock()

    def fn() -> bool:
        return lock.locked()

    ok, failures, report = _run(fn)
    assert not ok
    assert [f.name for f in failures] == ["fn.<nonlocal lock>"]
    assert report.startswith("fn failed:")


def test_every_failing_item_is_found_and_depth_bounds_the_search() -> None:
    value = [1, threading.Lock(), "x", Trainer()]
    ok, failures, _ = _run(value, name="items")
    assert not ok
    assert {f.name for f in failures} == {"items[1]", "items[3].model.lock"}
    ok, failures, report = _run(value, name="items", depth=1)
    assert {f.name for f in failures} == {"items[1]", "items[3]"}
    ok, failures, report = _run(value, name="items", depth=0)
    assert [f.obj for f in failures] == [value] and report.count("\n") == 1


def test_a_negative_depth_is_refused() -> None:
    with pytest.raises(ValueError, match="depth must be >= 0"):
        inspect_serializability(1, depth=-1)
