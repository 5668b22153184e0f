"""Restoring rllib's Tune trainables unpickles nothing: a copied checkpoint directory
with pickles planted in it (``.tune_metadata``, ``checkpoint_dict.pkl``) restores from
rllib's own files, and the planted pickles never run (skipped without rayfield-tune)."""

from __future__ import annotations

import os
import pickle
import shutil
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("rayfield.tune")

CONFIG = {
    "env": "CartPole-v1",
    "num_workers": 0,
    "train_batch_size": 200,
    "rollout_fragment_length": 100,
    "model": {"fcnet_hiddens": [16]},
    "seed": 0,
}


class MakesMarker:
    """Unpickling this creates the directory ``marker``: proof that a pickle ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (os.mkdir, (self.marker,))


def _trainable() -> Any:
    from rayfield.rllib.tune_trainables import PG

    return PG(config=CONFIG)


@pytest.fixture
def saved(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A Tune checkpoint of PG after one iteration, as Trainable.save wrote it."""
    monkeypatch.chdir(tmp_path)  # a Trainable enters its log dir; the test's cwd comes back
    first = _trainable()
    try:
        first.train()
        return Path(first.save(str(tmp_path / "run")))
    finally:
        first.stop()


def test_a_copied_checkpoint_with_planted_pickles_restores_without_them(
    saved: Path, tmp_path: Path
) -> None:
    copied = tmp_path / "copied"
    shutil.copytree(saved, copied)
    marker = tmp_path / "unpickled"
    planted = pickle.dumps(MakesMarker(marker))
    for name in (".tune_metadata", "checkpoint_dict.pkl"):
        (copied / name).write_bytes(planted)
    second = _trainable()
    try:
        second.restore(str(copied))
        # the counters come from rllib's algorithm_state.json, not from .tune_metadata
        assert second.iteration == 1
        assert second.train()["training_iteration"] == 2
    finally:
        second.stop()
    assert not marker.exists()


def test_a_blob_that_claims_a_pickled_dict_is_refused(saved: Path, tmp_path: Path) -> None:
    marker = tmp_path / "unpickled"
    files = {p.name: p.read_bytes() for p in saved.iterdir() if p.name != ".tune_metadata"}
    files["checkpoint_dict.pkl"] = pickle.dumps(MakesMarker(marker))
    meta = {
        "experiment_id": "x",
        "iteration": 1,
        "timesteps_total": None,
        "time_total": 0.0,
        "episodes_total": None,
        "saved_as_dict": True,  # Tune would unpickle checkpoint_dict.pkl
        "relpath": None,
    }
    blob = {"files": files, "meta": meta}
    trainable = _trainable()
    try:
        with pytest.raises(ValueError, match="pickled dict"):
            trainable.restore_from_object(blob)
    finally:
        trainable.stop()
    assert not marker.exists()
