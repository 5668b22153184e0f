"""The experiment state file: trial round trip and atomic writes."""

from __future__ import annotations

import json
import os

from rayfield import tune
from rayfield.tune.state import STATE_FILE, load_state, trial_from_json, trial_to_json, write_state
from rayfield.tune.trial import Resources, Trial, TrialCheckpoint


def test_trial_round_trip_restarts_unfinished_trials(tmp_path):
    ckpt_dir = tmp_path / "checkpoint_000002"
    ckpt_dir.mkdir()
    trial = Trial(
        "f",
        {"lr": 0.1, "fn": print},
        experiment_tag="0_lr=0.1",
        local_dir=str(tmp_path),
        resources=Resources.from_spec({"cpu": 2, "gpu": 0.5}),
        stopping_criterion={"training_iteration": 5},
        checkpoint_freq=2,
        max_failures=3,
    )
    trial.status = Trial.RUNNING
    trial.update_last_result({"training_iteration": 2, "acc": float("nan")})
    trial.disk_checkpoints = [TrialCheckpoint("disk", str(ckpt_dir), {"training_iteration": 2})]
    trial.checkpoint = trial.disk_checkpoints[0]
    data = json.loads(json.dumps(trial_to_json(trial)))
    back = trial_from_json(data, config={"lr": 0.1, "fn": print})
    assert back.status == Trial.PENDING  # it was running: it restarts
    assert back.trial_id == trial.trial_id and back.config["fn"] is print
    assert back.resources == trial.resources and back.resources.gpu == 0.5
    assert back.checkpoint is not None and back.checkpoint.value == str(ckpt_dir)
    assert back.logdir == trial.logdir and str(back) == str(trial)
    assert data["last_result"]["acc"] is None  # NaN is not JSON


def test_finished_trials_stay_finished(tmp_path):
    trial = Trial("f", {}, local_dir=str(tmp_path))
    trial.status = Trial.TERMINATED
    assert trial_from_json(trial_to_json(trial)).status == Trial.TERMINATED


def test_write_state_is_atomic_and_leaves_no_temp_files(tmp_path):
    write_state(str(tmp_path), {"trials": [], "n": 1})
    write_state(str(tmp_path), {"trials": [], "n": 2})
    assert load_state(str(tmp_path))["n"] == 2
    assert os.listdir(tmp_path) == [STATE_FILE]
    assert load_state(str(tmp_path / "missing")) is None


def test_resources_spec_errors():
    import pytest

    with pytest.raises(tune.TuneError, match="extra_cpu"):
        Resources.from_spec({"driver_cpu_limit": 1})
    with pytest.raises(tune.TuneError, match=">= 0"):
        Resources.from_spec({"cpu": -1})
    with pytest.raises(tune.TuneError, match="must be a dict"):
        Resources.from_spec(3)
    r = Resources.from_spec({"CPU": 2, "extra_cpu": 1, "accel": 1})
    assert r.total() == {"CPU": 3.0, "accel": 1.0}
    assert r.summary_string() == "3 CPUs, 0 GPUs"


def test_rebase_trial_moves_paths_under_the_new_experiment_dir():
    from rayfield.tune.state import rebase_trial

    data = {
        "local_dir": "/old/exp",
        "logdir": "/old/exp/f_0_x=1",
        "error_file": "/old/exp/f_0_x=1/error.txt",
        "checkpoint": "/old/exp/f_0_x=1/checkpoint_000002",
        "checkpoints": [{"path": "/old/exp/f_0_x=1/checkpoint_000001", "result": {}}],
    }
    moved = rebase_trial(data, "/new/place/exp/")
    assert moved["local_dir"] == "/new/place/exp"
    assert moved["logdir"] == "/new/place/exp/f_0_x=1"
    assert moved["error_file"] == "/new/place/exp/f_0_x=1/error.txt"
    assert moved["checkpoint"] == "/new/place/exp/f_0_x=1/checkpoint_000002"
    assert moved["checkpoints"][0]["path"] == "/new/place/exp/f_0_x=1/checkpoint_000001"
    assert data["logdir"] == "/old/exp/f_0_x=1"  # the saved data is left as it was
    assert rebase_trial(data, "/old/exp") is data
    elsewhere = dict(data, checkpoint="/old/expanded/ckpt")  # a sibling, not under it
    assert rebase_trial(elsewhere, "/n")["checkpoint"] == "/old/expanded/ckpt"


def test_the_state_is_private_and_another_users_copy_is_refused(tmp_path):
    import stat

    import pytest

    from rayfield.exceptions import UnsafeFileError
    from rayfield.tune.state import FINISHED_FILE, append_finished

    exp = tmp_path / "exp"
    write_state(str(exp), {"trials": []})
    append_finished(str(exp), b"", 0)
    assert stat.S_IMODE(os.stat(exp).st_mode) == 0o700
    for name in (STATE_FILE, FINISHED_FILE):
        assert stat.S_IMODE(os.stat(exp / name).st_mode) == 0o600
    assert load_state(str(exp)) == {"trials": []}
    os.chmod(exp / STATE_FILE, 0o666)  # a file others could have written is not read
    with pytest.raises(UnsafeFileError, match="group or others can write"):
        load_state(str(exp))


def test_the_state_says_which_configs_need_params_pkl(tmp_path):
    import numpy as np

    def saved(config):
        return trial_to_json(Trial("f", config, local_dir=str(tmp_path)))["config_pickled"]

    assert not saved({"lr": 0.1, "layers": [1, 2], "opt": {"name": "sgd"}})
    assert not saved({"lr": np.float64(0.1), "n": np.int64(3)})  # back as equal numbers
    assert saved({"shape": (1, 2)}) and saved({"fn": print}) and saved({"w": np.zeros(2)})
