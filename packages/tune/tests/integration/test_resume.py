"""Kill the driver mid-experiment (SIGKILL), then resume it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from rayfield.testing import wait_for
from rayfield.tune.state import load_state

sys.path.insert(0, str(Path(__file__).parent))
import resume_driver

pytestmark = pytest.mark.usefixtures("cluster")


def _state(path: Path) -> dict | None:
    """The saved state (finished trials from their file, then the others)."""
    try:
        return load_state(str(path))
    except (OSError, ValueError):
        return None


def _result_lines(logdir: str) -> list[dict]:
    with open(os.path.join(logdir, "result.json")) as f:
        return [json.loads(line) for line in f]


def test_sigkill_the_driver_then_resume(tmp_path):
    results = tmp_path / "results"
    driver = subprocess.Popen(
        [sys.executable, resume_driver.__file__, str(results), str(tmp_path / "rf")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    exp = results / "killed"
    try:

        def progressed() -> bool:
            trials = (_state(exp) or {}).get("trials", [])
            done = [t for t in trials if t["status"] == "TERMINATED"]
            running = [  # a trial with a checkpoint and reports still to make
                t
                for t in trials
                if t["status"] == "RUNNING"
                and any(c["result"].get("step", 5) < 5 for c in t["checkpoints"])
            ]
            return len(done) >= 2 and bool(running)

        # (an ended driver stops the wait at once, to fail below)
        wait_for(
            lambda: driver.poll() is not None or progressed(),
            120,
            "2 trials done and a running one with a checkpoint and reports still to make",
        )
        assert driver.poll() is None, "the driver ended before it was killed"
        workers = psutil.Process(driver.pid).children(recursive=True)
        driver.send_signal(signal.SIGKILL)
        driver.wait()
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    # The killed driver's workers exit on their own once their node is gone.
    _, alive = psutil.wait_procs(workers, timeout=30)
    for proc in alive:
        proc.kill()
    assert not alive, f"workers outlived their driver: {alive}"

    before = _state(exp)
    finished_before = {
        t["trial_id"]: t["logdir"] for t in before["trials"] if t["status"] == "TERMINATED"
    }
    lines_before = {tid: len(_result_lines(d)) for tid, d in finished_before.items()}

    analysis = resume_driver.run(str(results), 0.0, resume=True)
    trials = list(analysis)
    assert len(trials) == 6 and {t.config["i"] for t in trials} == set(range(6))
    assert all(t.status == "TERMINATED" for t in trials)
    for trial in trials:
        lines = _result_lines(trial.logdir)
        steps = [r["step"] for r in lines]
        assert steps[-1] == 5 and set(steps) == {1, 2, 3, 4, 5}  # no result lost
        if trial.trial_id in finished_before:  # not run again
            assert len(lines) == lines_before[trial.trial_id]
    resumed = [t for t in trials if t.last_result.get("resumed")]
    assert resumed, "no trial continued from its checkpoint"


def test_tuner_restore_keeps_finished_trials(tmp_path):
    from rayfield import tune

    def f(config):
        tune.report(v=config["a"])

    tuner = tune.Tuner(
        f,
        param_space={"a": tune.grid_search([1, 2, 3])},
        run_config=tune.RunConfig(name="exp", storage_path=str(tmp_path), verbose=0),
    )
    first = tuner.fit()
    assert tune.Tuner.can_restore(str(tmp_path / "exp"))
    again = tune.Tuner.restore(str(tmp_path / "exp"), f).fit()
    assert sorted(r.metrics["v"] for r in again) == [1, 2, 3]
    assert {r.path for r in again} == {r.path for r in first}
    for result in again:  # nothing ran twice
        with open(os.path.join(result.path, "result.json")) as fh:
            assert len(fh.readlines()) == 1
    assert tuner.get_results().num_terminated == 3
    with pytest.raises(tune.TuneError, match="No experiment state"):
        tune.Tuner.restore(str(tmp_path / "missing"), f)


def _unfinish(exp: Path) -> None:
    """Make every saved trial RUNNING again, as a driver killed mid-trial leaves them."""
    state = load_state(str(exp))
    assert state is not None
    for trial in state["trials"]:
        trial["status"] = "RUNNING"
    state.pop("finished", None)
    (exp / "finished_trials.jsonl").unlink(missing_ok=True)
    (exp / "experiment_state.json").write_text(json.dumps(state))


def test_resume_takes_a_config_json_cannot_hold_from_params_pkl_only_when_trusted(tmp_path):
    from rayfield import tune
    from rayfield.tune.pickles import UntrustedPickleError

    def f(config):
        tune.report(kind=type(config["shape"]).__name__)

    kwargs = {"name": "exp", "local_dir": str(tmp_path), "verbose": 0}
    tune.run(f, config={"shape": (2, 3)}, **kwargs)
    _unfinish(tmp_path / "exp")
    with pytest.raises(UntrustedPickleError, match=r"params\.pkl holds a pickle") as e:
        tune.run(f, resume=True, **kwargs)
    assert "trusted=True" in str(e.value)
    [trial] = tune.run(f, resume=True, trusted=True, **kwargs)
    assert trial.config == {"shape": (2, 3)} and trial.last_result["kind"] == "tuple"
