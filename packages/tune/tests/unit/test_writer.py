"""The driver's background writer, the loggers on it, the cached state encoding and the
light import of ``rayfield.tune`` that trial actors do."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import threading

import pytest
from simulator import Simulator, make_runner

from rayfield import tune
from rayfield.tune.logger import DEFAULT_LOGGERS, LoggerCallback
from rayfield.tune.trial import Trial
from rayfield.tune.writer import BackgroundWriter


def test_writer_runs_operations_in_order_off_the_callers_thread():
    writer = BackgroundWriter()
    seen: list[tuple[int, str]] = []
    for i in range(50):
        writer.submit(lambda i=i: seen.append((i, threading.current_thread().name)))
    writer.drain()
    assert [i for i, _ in seen] == list(range(50))
    assert {name for _, name in seen} == {"tune-writer"}
    writer.close()
    writer.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        writer.submit(lambda: None)


def test_a_held_writer_runs_nothing_until_released():
    writer = BackgroundWriter(held=True)
    seen: list[int] = []
    writer.submit(lambda: seen.append(1))
    writer.submit(lambda: seen.append(2))
    probe = threading.Event()
    writer._queue.put(probe.set)  # runs once the thread has taken what came before it
    assert probe.wait(10) and seen == []  # the two are still held
    writer.release()
    writer.submit(lambda: seen.append(3))
    writer.drain()  # releases the third
    assert seen == [1, 2, 3]
    writer.submit(lambda: seen.append(4))
    writer.close()  # releases and runs it before the thread ends
    assert seen == [1, 2, 3, 4]


def test_a_release_wakes_the_thread_once_and_a_failure_spares_the_rest():
    writer = BackgroundWriter(held=True)
    seen: list[int] = []
    puts: list[object] = []
    put = writer._queue.put
    writer._queue.put = lambda item, *a, **k: (puts.append(item), put(item, *a, **k))[1]
    for i in range(50):
        writer.submit(lambda i=i: seen.append(i) if i != 7 else 1 / 0)
    writer.release()
    assert len(puts) == 1  # one queue item (one wake-up) for the 50 operations
    with pytest.raises(ZeroDivisionError):
        writer.drain()
    assert seen == [i for i in range(50) if i != 7]  # in order, the failed one skipped
    writer.close()


def test_writer_reports_a_failed_operation_on_drain_and_keeps_going():
    writer = BackgroundWriter()
    seen = []
    writer.submit(lambda: 1 / 0)
    writer.submit(lambda: seen.append("after"))
    with pytest.raises(ZeroDivisionError):
        writer.drain()
    assert seen == ["after"]
    writer.drain()  # reported once
    writer.close()


def test_logger_callback_on_a_writer_writes_the_same_files(tmp_path):
    writer = BackgroundWriter()
    trial = Trial("f", {"lr": 0.1, "fn": print}, local_dir=str(tmp_path))
    cb = LoggerCallback(DEFAULT_LOGGERS, writer=writer)
    cb.on_trial_start(trial)
    for i in (1, 2, 3):
        cb.on_trial_result(trial, {"training_iteration": i, "loss": 1.0 / i})
    cb.on_checkpoint()
    writer.drain()  # flushed: a state written now is not ahead of the results
    with open(os.path.join(trial.logdir, "result.json")) as f:
        assert [json.loads(line)["training_iteration"] for line in f] == [1, 2, 3]
    cb.on_trial_error(trial, "Traceback: boom")
    assert trial.error_file.endswith("error_0.txt")
    cb.on_trial_complete(trial)
    cb.on_experiment_end([trial])
    writer.close()
    with open(trial.error_file) as f:
        assert f.read() == "Traceback: boom"
    with open(os.path.join(trial.logdir, "params.pkl"), "rb") as f:
        assert pickle.load(f)["fn"] is print  # cloudpickle for a config with a function
    with open(os.path.join(trial.logdir, "params.json")) as f:
        assert json.load(f)["lr"] == 0.1


def test_encoded_state_matches_the_state_as_trials_finish():
    runner = make_runner({"x": tune.grid_search([1, 2, 3, 4])}, stop={"training_iteration": 3})
    states = []
    finished: list[dict] = []  # what the finished-trials file holds so far

    class Snap(tune.Callback):
        def on_trial_complete(self, trial):
            lines, _, text = runner.encode_checkpoint()
            finished.extend(json.loads(line) for line in lines.splitlines())
            encoded = json.loads(text)
            expected = json.loads(json.dumps(runner.get_state()))
            by_id = {t["trial_id"]: t for t in finished + encoded["trials"]}
            states.append(by_id == {t["trial_id"]: t for t in expected["trials"]})

    runner.callbacks.append(Snap())
    Simulator(runner, lambda c, it: {"score": c["x"] * it}).run()
    assert states == [True] * 4
    lines, _, text = runner.encode_checkpoint()
    assert lines == b"" and json.loads(text)["trials"] == []
    assert [t["status"] for t in finished] == ["TERMINATED"] * 4
    assert [t["last_result"]["training_iteration"] for t in finished] == [3] * 4


def test_actors_import_of_rayfield_tune_stays_light():
    code = (
        "import sys, rayfield.tune.function_trainable\n"
        "heavy = [m for m in ('numpy', 'pandas', 'rayfield.tune.tune', 'rayfield.tune.executor')"
        " if m in sys.modules]\n"
        "print(heavy)\n"
        "from rayfield import tune\n"
        "print(tune.run.__module__, tune.schedulers.PB2.__name__)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[:2] == ["[]", "rayfield.tune.tune PB2"]


def test_importing_one_scheduler_loads_only_its_module():
    """What a trainable's module that imports ASHA costs each trial actor."""
    code = (
        "import sys\n"
        "from rayfield.tune.schedulers import ASHAScheduler\n"
        "print(sorted(m.rsplit('.', 1)[1] for m in sys.modules"
        " if m.startswith('rayfield.tune.schedulers.')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['async_hyperband', 'trial_scheduler']"
