"""`rayfield.rllib.tune_runner`'s decisions: when a run needs Tune, the experiment spec it
builds, and the scheduler a flag names."""

from __future__ import annotations

import os

import click
import pytest

from rayfield.rllib import tune_runner as tr


def test_search_spaces_are_found_at_any_depth() -> None:
    assert tr.has_search_space({"lr": {"grid_search": [0.1, 0.01]}})
    assert tr.has_search_space({"model": {"fcnet_hiddens": [{"eval": "[8]"}]}})
    assert not tr.has_search_space({"model": {"fcnet_hiddens": [16]}, "lr": 0.1})


def test_tune_reason() -> None:
    plain = {"default": {"run": "PG", "num_samples": 1, "config": {"lr": 0.1}}}
    assert tr.tune_reason(plain, []) is None
    assert tr.tune_reason(plain, ["--resume"]) == "--resume"
    assert tr.tune_reason({"x": {"num_samples": 2}}, []) == "--num-samples > 1"
    assert tr.tune_reason({"x": {"upload_dir": "file:///t"}}, []) == "'upload_dir' (experiment 'x')"
    assert "grid_search" in str(tr.tune_reason({"x": {"config": {"lr": {"grid_search": [1]}}}}, []))


def test_flags_given_counts_zero_but_not_unset() -> None:
    flags = {name: None for name in tr.TUNE_FLAGS} | {"resume": False, "queue_trials": False}
    assert tr.flags_given(flags) == []
    assert tr.flags_given(flags | {"max_failures": 0}) == ["--max-failures"]


def test_spec_flags() -> None:
    flags = {name: None for name in tr.TUNE_FLAGS} | {"export_formats": "Model, checkpoint"}
    assert tr.spec_flags(flags, {}) == {"export_formats": ["model", "checkpoint"]}
    assert tr.spec_flags(flags | {"export_formats": None}, {"cpu": 2}) == {
        "resources_per_trial": {"cpu": 2}
    }
    with pytest.raises(click.BadParameter, match="unknown format 'onnx'"):
        tr.spec_flags(flags | {"export_formats": "onnx"}, {})


def test_tune_spec_is_the_reference_spec() -> None:
    spec = tr.tune_spec(
        {"run": "PG", "env": "CartPole-v1", "config": {"lr": 0.1}, "local_dir": "/tmp/r"}, 0
    )
    assert spec == {
        "run": "PG",
        "checkpoint_freq": 0,
        "checkpoint_at_end": False,
        "local_dir": "/tmp/r",
        "resources_per_trial": None,
        "stop": {},
        "config": {"lr": 0.1, "env": "CartPole-v1"},
        "restore": None,
        "num_samples": 1,
        "upload_dir": None,
        "keep_checkpoints_num": None,
        "checkpoint_score_attr": "training_iteration",
        "max_failures": 3,
    }
    with pytest.raises(click.UsageError, match="did you mean 'PPO'"):
        tr.tune_spec({"run": "PPX", "env": "CartPole-v1"}, 0)
    # --restore is the trainable's to read (rllib's files); Tune would unpickle its metadata
    restoring = {"run": "PG", "env": "CartPole-v1", "restore": "~/r/checkpoint_2/checkpoint-2"}
    assert tr.tune_spec(restoring, 0)["restore"] is None
    assert tr.restore_path(restoring) == os.path.expanduser("~/r/checkpoint_2/checkpoint-2")
    assert tr.restore_path({"run": "PG"}) is None
    relative = tr.restore_path({"restore": "r/checkpoint-2"})
    assert relative == os.path.join(os.getcwd(), "r", "checkpoint-2")
    with pytest.raises(click.UsageError, match="--env"):
        tr.tune_spec({"run": "PG"}, 0)


def test_make_scheduler() -> None:
    tune = pytest.importorskip("rayfield.tune")
    fifo, search = tr.make_scheduler(tune, None, {})
    assert type(fifo).__name__ == "FIFOScheduler" and search is None
    asha, _ = tr.make_scheduler(tune, "AsyncHyperBand", {"max_t": 4, "grace_period": 1})
    assert type(asha).__name__ == "AsyncHyperBandScheduler"
    with pytest.raises(click.BadParameter, match="no_such_argument"):
        tr.make_scheduler(tune, "HyperBand", {"no_such_argument": 1})
