"""Tune keeps JSON where it can, and loads a pickle from disk only when told it is trusted."""

from __future__ import annotations

import json
import logging
import os
import pickle
import stat
from pathlib import Path

import numpy as np
import pytest

from rayfield import tune
from rayfield.tune.checkpoint import DICT_JSON, DICT_PICKLE, LEGACY_METADATA_FILE, METADATA_FILE
from rayfield.tune.logger import saved_config
from rayfield.tune.pickles import UntrustedPickleError, json_exact
from rayfield.tune.search.searcher import Searcher
from rayfield.tune.trainable import read_checkpoint_dir


class Marker:
    """Unpickling it writes a file: the sign that a pickle was loaded."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __reduce__(self):
        return (Path.write_text, (Path(self.path), "unpickled"))


class DictTrainable(tune.Trainable):
    """Saves ``config["state"]`` as its dict checkpoint and restores it."""

    def setup(self, config):
        self.state = config.get("state")

    def step(self):
        return {"x": 1}

    def save_checkpoint(self, checkpoint_dir):
        return {"state": self.state}

    def load_checkpoint(self, checkpoint):
        self.state = checkpoint["state"]


def mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_json_exact_takes_only_what_json_gives_back():
    assert json_exact({"a": [1, 2.5, "s", None, True, {"b": []}]})
    assert not json_exact({"a": (1, 2)})  # a tuple comes back a list
    assert not json_exact({1: "a"})  # an int key comes back a str
    assert not json_exact({"a": np.float64(1.0)})
    assert not json_exact({"f": print})


def test_a_json_dict_checkpoint_is_kept_as_json_and_restores_without_opt_in(tmp_path):
    t = DictTrainable({"state": {"w": [1.0, 2.0]}}, trial_info={"logdir": str(tmp_path / "a")})
    t.train()
    path = Path(t.save(str(tmp_path / "ckpt")))
    assert json.loads((path / DICT_JSON).read_text()) == {"state": {"w": [1.0, 2.0]}}
    assert json.loads((path / METADATA_FILE).read_text())["iteration"] == 1
    assert not (path / DICT_PICKLE).exists() and not (path / LEGACY_METADATA_FILE).exists()
    assert mode(path) == 0o700 and mode(path / METADATA_FILE) == 0o600
    fresh = DictTrainable({}, trial_info={"logdir": str(tmp_path / "b")})
    fresh.restore(str(path))
    assert fresh.state == {"w": [1.0, 2.0]} and fresh.iteration == 1


def test_a_pickled_dict_checkpoint_needs_trusted(tmp_path):
    state = {"w": np.arange(3.0), "shape": (1, 3)}
    t = DictTrainable({"state": state}, trial_info={"logdir": str(tmp_path / "a")})
    path = Path(t.save(str(tmp_path / "ckpt")))
    assert (path / DICT_PICKLE).exists() and not (path / DICT_JSON).exists()
    assert mode(path / DICT_PICKLE) == 0o600
    fresh = DictTrainable({}, trial_info={"logdir": str(tmp_path / "b")})
    with pytest.raises(UntrustedPickleError, match=r"checkpoint_dict\.pkl holds a pickle") as e:
        fresh.restore(str(path))
    assert "Trainable.restore(path, trusted=True)" in str(e.value)
    assert fresh.state is None
    fresh.restore(str(path), trusted=True)
    assert fresh.state["shape"] == (1, 3) and list(fresh.state["w"]) == [0.0, 1.0, 2.0]
    # In memory, the blob this process made needs no opt-in.
    other = DictTrainable({}, trial_info={"logdir": str(tmp_path / "c")})
    other.restore_from_object(t.save_to_object())
    assert other.state["shape"] == (1, 3)


def test_an_old_pickled_metadata_file_is_never_loaded_without_trusted(tmp_path):
    path = tmp_path / "ckpt"
    path.mkdir(mode=0o700)
    marker = tmp_path / "marker"
    (path / LEGACY_METADATA_FILE).write_bytes(pickle.dumps(Marker(marker)))
    with pytest.raises(UntrustedPickleError, match=r"\.tune_metadata holds a pickle"):
        read_checkpoint_dir(str(path))
    with pytest.raises(UntrustedPickleError):
        DictTrainable({}, trial_info={"logdir": str(tmp_path / "b")}).restore(str(path))
    assert not marker.exists()


def test_metadata_naming_a_path_outside_the_checkpoint_is_refused(tmp_path):
    t = DictTrainable({"state": 1}, trial_info={"logdir": str(tmp_path / "a")})
    path = Path(t.save(str(tmp_path / "ckpt")))
    meta = json.loads((path / METADATA_FILE).read_text())
    meta.update(saved_as_dict=False, relpath="../../etc")
    (path / METADATA_FILE).write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="leads outside the checkpoint"):
        read_checkpoint_dir(str(path))
    (path / METADATA_FILE).write_text(json.dumps({"iteration": "1; rm -rf /"}))
    with pytest.raises(tune.TuneError, match="not Tune checkpoint metadata"):
        read_checkpoint_dir(str(path))


def test_checkpoint_to_dict_loads_a_pickle_only_when_trusted(tmp_path):
    plain = tune.Checkpoint.from_dict({"a": [1, 2]})
    assert os.listdir(plain.path) == [DICT_JSON] and mode(Path(plain.path)) == 0o700
    assert tune.Checkpoint(plain.path).to_dict() == {"a": [1, 2]}
    made = tune.Checkpoint.from_dict({"a": (1, 2)})
    assert made.to_dict() == {"a": (1, 2)}  # made here: trusted
    again = tune.Checkpoint(made.path)  # the same directory, found on disk
    with pytest.raises(UntrustedPickleError, match=r"Checkpoint\.to_dict\(trusted=True\)"):
        again.to_dict()
    assert again.to_dict(trusted=True) == {"a": (1, 2)}


class Counting(Searcher):
    def __init__(self, extra=None):
        super().__init__(metric="score", mode="max")
        self.count = 0
        self.extra = extra

    def suggest(self, trial_id):
        self.count += 1
        return {"x": self.count}


def test_searcher_state_is_json_and_a_pickled_one_needs_trusted(tmp_path):
    s = Counting()
    s.suggest("a")
    s.save(str(tmp_path / "s.json"))
    assert json.loads((tmp_path / "s.json").read_text())["count"] == 1
    assert mode(tmp_path / "s.json") == 0o600
    fresh = Counting()
    fresh.restore(str(tmp_path / "s.json"))
    assert fresh.suggest("b") == {"x": 2}
    Counting(extra=Marker(tmp_path / "marker")).save(str(tmp_path / "s.pkl"))
    with pytest.raises(UntrustedPickleError, match=r"Searcher\.restore\(path, trusted=True\)"):
        Counting().restore(str(tmp_path / "s.pkl"))
    assert not (tmp_path / "marker").exists()


def test_a_config_json_cannot_hold_comes_from_params_pkl_only_when_trusted(tmp_path, caplog):
    logdir = tmp_path / "trial"
    logdir.mkdir(mode=0o700)
    marker = tmp_path / "marker"
    (logdir / "params.pkl").write_bytes(pickle.dumps(Marker(marker)))
    data = {"trial_id": "t1", "logdir": str(logdir), "config_pickled": True}
    with pytest.raises(UntrustedPickleError, match=r"params\.pkl holds a pickle"):
        saved_config(data, trusted=False, opt_in="trusted=True", strict=True)
    with caplog.at_level(logging.WARNING):
        assert saved_config(data, trusted=False, opt_in="X(trusted=True)", strict=False) is None
    assert "X(trusted=True)" in caplog.text
    # A config JSON holds exactly never reads params.pkl, trusted or not.
    plain = dict(data, config_pickled=False)
    assert saved_config(plain, trusted=True, opt_in="", strict=True) is None
    assert not marker.exists()
    (logdir / "params.pkl").write_bytes(pickle.dumps({"shape": (1, 2)}))
    assert saved_config(data, trusted=True, opt_in="", strict=True) == {"shape": (1, 2)}


def test_checkpoints_of_the_running_experiments_trials_load_their_pickled_dicts(tmp_path):
    from rayfield.tune.analysis import ResultGrid
    from rayfield.tune.trial import Trial, TrialCheckpoint

    path = tune.Checkpoint.from_dict({"a": (1, 2)}).path  # as this run's trial wrote it
    trial = Trial("f", {}, local_dir=str(tmp_path))
    trial.disk_checkpoints = [TrialCheckpoint("disk", path, {"score": 1.0})]
    analysis = tune.ExperimentAnalysis(str(tmp_path), [trial], "score", "max")
    assert analysis.get_best_checkpoint(trial).to_dict() == {"a": (1, 2)}
    assert ResultGrid(analysis)[0].checkpoint.to_dict() == {"a": (1, 2)}
