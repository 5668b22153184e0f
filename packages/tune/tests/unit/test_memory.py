"""What the driver keeps per finished trial: bounded, whatever the trial reported.

The experiment state saves each finished trial once (``finished_trials.jsonl``) and the
runner keeps no encoded copy; a finished trial keeps its last result and one summary per
metric, not its history.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from simulator import Simulator, make_runner

from rayfield import tune
from rayfield.tune.state import FINISHED_FILE, append_finished, load_state, write_state_text
from rayfield.tune.trial import Trial


def deep_size(root: Any) -> int:
    """Bytes of ``root`` and every object it reaches through containers and instance
    attributes (each object counted once; classes, functions and modules left out)."""
    seen: set[int] = set()
    total = 0
    stack = [root]
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, (type, type(deep_size), type(os))):
            continue
        seen.add(id(obj))
        total += sys.getsizeof(obj)
        if isinstance(obj, dict):
            stack.extend(obj.keys())
            stack.extend(obj.values())
        elif isinstance(obj, (list, tuple, set, frozenset)):
            stack.extend(obj)
        if hasattr(obj, "__dict__") and not isinstance(obj, type):
            stack.append(vars(obj))
        for slot in getattr(type(obj), "__slots__", ()):
            if hasattr(obj, slot):
                stack.append(getattr(obj, slot))
    return total


def curve(config: dict[str, Any], it: int) -> dict[str, Any]:
    """A result as a trainable sends it: metrics, auto-filled fields and the config."""
    return {
        "loss": 1.0 / it + config["x"],
        "accuracy": 1.0 - 1.0 / (it + 1),
        "time_total_s": 0.01 * it,
        "timestamp": 1_700_000_000 + it,
        "hostname": "host",
        "config": dict(config),
    }


def finished_runner(reports: int, trials: int = 4) -> Any:
    runner = make_runner(
        {"x": tune.grid_search([0.1 * i for i in range(trials)])},
        stop={"training_iteration": reports},
    )
    Simulator(runner, curve).run()
    runner.encode_checkpoint()  # the finished trials leave the runner's save queue
    assert all(t.status == Trial.TERMINATED for t in runner.get_trials())
    return runner


def test_a_finished_trials_footprint_does_not_grow_with_its_reports():
    few, many = finished_runner(5), finished_runner(500)
    for short, long in zip(few.get_trials(), many.get_trials(), strict=True):
        assert long.last_result["training_iteration"] == 500
        assert long.metric_analysis["loss"]["count"] == 500
        # The same fields, whatever the number of results: what differs is which equal
        # floats happen to be one object (a few 24-byte floats), not a history (500
        # results of this curve are over 300 KB).
        assert abs(deep_size(long) - deep_size(short)) < 256, (deep_size(short), deep_size(long))
    # The whole runner too: nothing per result is kept anywhere in it.
    assert abs(deep_size(many) - deep_size(few)) < 256 * 4


def test_a_finished_trial_keeps_what_the_analysis_needs():
    runner = finished_runner(20)
    trial = runner.get_trials()[-1]
    assert trial.last_result["config"] is trial.config  # one copy of the config
    stats = trial.metric_analysis["loss"]
    assert dict(stats) == {
        "max": 1.0 + trial.config["x"],
        "min": stats["last"],
        "avg": stats["avg"],
        "last": 1.0 / 20 + trial.config["x"],
        "count": 20,
    }
    assert "pid" not in trial.metric_analysis and "timestamp" not in trial.metric_analysis
    analysis = tune.ExperimentAnalysis("/nonexistent", runner.get_trials(), "loss", "min")
    assert analysis.get_best_trial(scope="all") is runner.get_trials()[0]


def test_each_finished_trial_is_encoded_once(tmp_path):
    runner = make_runner({"x": tune.grid_search([1, 2, 3])}, stop={"training_iteration": 2})
    saves: list[tuple[bytes, int, str]] = []

    class Save(tune.Callback):
        def on_trial_complete(self, trial):
            saves.append(runner.encode_checkpoint())

    runner.callbacks.append(Save())
    Simulator(runner, lambda c, it: {"score": c["x"] * it}).run()
    saves.append(runner.encode_checkpoint())
    for lines, offset, text in saves:
        append_finished(str(tmp_path), lines, offset)
        write_state_text(str(tmp_path), text)
    assert [len(lines.splitlines()) for lines, _, _ in saves] == [1, 1, 1, 0]
    assert [json.loads(text)["trials"] for *_, text in saves][-1] == []
    state = load_state(str(tmp_path))
    assert state is not None and state["finished"]["count"] == 3
    assert [t["config"]["x"] for t in state["trials"]] == [1, 2, 3]
    assert [t["last_result"]["score"] for t in state["trials"]] == [2, 4, 6]


def test_bytes_past_the_saved_state_are_cut_by_the_next_append(tmp_path):
    """A driver killed between appending finished trials and writing the state that
    counts them: the state on disk does not count them, and they are dropped."""
    append_finished(str(tmp_path), b'{"a": 1}\n', 0)
    write_state_text(
        str(tmp_path),
        json.dumps({"trials": [], "finished": {"file": FINISHED_FILE, "bytes": 9}}),
    )
    append_finished(str(tmp_path), b'{"b": 2}\n', 9)  # written, then the driver died
    assert [t["a"] for t in load_state(str(tmp_path))["trials"]] == [1]
    append_finished(str(tmp_path), b'{"c": 3}\n', 9)  # the resumed driver appends
    with open(tmp_path / FINISHED_FILE, "rb") as f:
        assert f.read() == b'{"a": 1}\n{"c": 3}\n'
