"""RLlib's Trainer and its Tune trainable pass Tune's Trainable conformance tests
(`rayfield.tune.testing.TrainableConformance`): the Trainer implements the contract
itself, and `make_trainable` is Tune's one adapter plus rllib's checkpoint layout."""

from __future__ import annotations

from typing import Any

import pytest

from rayfield.rllib.agents.pg import PGTrainer

tune = pytest.importorskip("rayfield.tune")
testing = pytest.importorskip("rayfield.tune.testing")

SMALL = {
    "env": "CartPole-v1",
    "num_workers": 0,
    "train_batch_size": 100,
    "model": {"fcnet_hiddens": [8]},
    "seed": 0,
}


class TestPGTrainer(testing.TrainableConformance):
    config = SMALL

    def make_trainable(self, config: dict[str, Any]) -> Any:
        return PGTrainer(config=config)


class TestPGTuneTrainable(testing.TrainableConformance):
    config = SMALL

    def make_trainable(self, config: dict[str, Any]) -> Any:
        from rayfield.rllib.tune_wrapper import make_trainable

        return make_trainable(tune, "PG")(config=config)


def test_the_tune_trainable_is_the_adapter_of_the_trainer() -> None:
    from rayfield.rllib.tune_wrapper import make_trainable

    cls = make_trainable(tune, "PG")
    assert issubclass(cls, tune.Trainable) and cls.__name__ == "PG"
    assert cls._inner_cls is PGTrainer
    trainer = PGTrainer(config=SMALL)
    try:
        assert isinstance(trainer, tune.TrainableProtocol)
    finally:
        trainer.stop()
