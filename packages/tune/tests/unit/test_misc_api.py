"""Stoppers, registries and small public helpers."""

from __future__ import annotations

import pytest

from rayfield import tune
from rayfield.tune.registry import get_env_creator, get_trainable_cls
from rayfield.tune.stopper import (
    MaximumIterationStopper,
    TimeoutStopper,
    TrialPlateauStopper,
    as_stopper,
)


def test_stoppers():
    assert MaximumIterationStopper(3)("t", {"training_iteration": 3})
    assert not MaximumIterationStopper(3)("t", {"training_iteration": 2})
    now = [100.0]
    timeout = TimeoutStopper(0.05, clock=lambda: now[0])
    assert not timeout.stop_all()
    now[0] += 0.049
    assert not timeout.stop_all()
    now[0] += 0.001
    assert timeout.stop_all()
    plateau = TrialPlateauStopper("m", std=0.01, num_results=3, grace_period=3)
    flat = [plateau("t", {"m": 1.0, "training_iteration": i}) for i in range(1, 5)]
    assert flat == [False, False, True, True]
    moving = TrialPlateauStopper("m", std=0.01, num_results=3, grace_period=1)
    assert not any(moving("u", {"m": float(i), "training_iteration": i}) for i in range(1, 6))
    with pytest.raises(tune.TuneError, match="stop must be"):
        as_stopper(3)
    assert as_stopper({}) is None


def test_register_env_and_trainables():
    tune.register_env("my_env", lambda env_config: ("env", env_config))
    assert get_env_creator("my_env")({"a": 1}) == ("env", {"a": 1})
    with pytest.raises(TypeError, match="register_env"):
        tune.register_env("bad", 3)

    def named(config):
        tune.report(x=1)

    tune.register_trainable("named_fn", named)
    assert issubclass(get_trainable_cls("named_fn"), tune.Trainable)
    with pytest.raises(TypeError, match="not a Trainable"):
        tune.register_trainable("bad", int)
    with pytest.raises(tune.TuneError, match="unknown trainable"):
        get_trainable_cls("never-registered")


def test_experiment_validation_messages():
    with pytest.raises(tune.TuneError, match="num_samples"):
        tune.Experiment("e", lambda c: None, num_samples=0)
    with pytest.raises(tune.TuneError, match="config must be a dict"):
        tune.Experiment("e", lambda c: None, config=[1])
    with pytest.raises(tune.TuneError, match="set upload_dir too"):
        tune.Experiment("e", lambda c: None, sync_function="aws s3 sync {source} {target}")
    with pytest.raises(tune.TuneError, match="No trainable specified"):
        tune.Experiment.from_json("e", {"config": {}})
    exp = tune.Experiment.from_json(
        "e", {"run": lambda c: None, "env": "CartPole-v0", "repeat": 3, "local_dir": "/tmp/x"}
    )
    assert exp.spec["config"]["env"] == "CartPole-v0" and exp.num_samples == 3
    assert exp.path == "/tmp/x/e"
