"""A fractional ``num_gpus`` learner, as RLlib places it, checked without a GPU: the
trainer's resource request asks for the fraction (Tune reserves it for the trial), and
the learner's device is ``cuda`` exactly when its process was given GPUs and CUDA is
available (with CUDA made unavailable here, and made "available" to check the choice).
``tests/gpu_check.py`` runs the same on a machine with a GPU."""

from __future__ import annotations

import logging

import gymnasium as gym
import pytest
import torch

from rayfield.rllib.agents.dqn import DQNTrainer
from rayfield.rllib.agents.ppo import PPOTrainer
from rayfield.rllib.agents.qmix import QMixTrainer
from rayfield.rllib.agents.sac import SACTrainer
from rayfield.rllib.policy.torch_policy import learner_device


@pytest.mark.parametrize("trainer", [PPOTrainer, DQNTrainer, SACTrainer, QMixTrainer])
def test_the_trainer_bundle_asks_for_the_fraction_of_a_gpu(trainer: type) -> None:
    request = trainer.default_resource_request({"num_gpus": 0.5, "num_workers": 2})
    assert request.bundles[0] == {"CPU": 1.0, "GPU": 0.5}  # the trainer and its learner
    assert all("GPU" not in b for b in request.bundles[1:])  # the rollout workers: CPU only
    assert request.required_resources == {"CPU": 3.0, "GPU": 0.5}


def test_tune_reserves_the_fraction_for_the_trial() -> None:
    from rayfield.tune.trial import Resources

    pgf = PPOTrainer.default_resource_request({"num_gpus": 0.25, "num_workers": 1})
    res = Resources.from_factory(pgf)
    assert res.gpu == 0.25 and res.cpu == 1.0 and res.extra_cpu == 1.0


def test_without_cuda_the_learner_stays_on_the_cpu(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert learner_device({"num_gpus": 0}) == torch.device("cpu")
    with caplog.at_level(logging.WARNING, logger="rayfield.rllib"):
        assert learner_device({"num_gpus": 0.5}) == torch.device("cpu")
    assert "num_gpus=0.5 but CUDA is not available" in caplog.text
    trainer = PPOTrainer(
        env="CartPole-v1",
        config={
            "num_gpus": 0.5,
            "num_workers": 0,
            "train_batch_size": 64,
            "sgd_minibatch_size": 32,
        },
    )
    try:
        policy = trainer.get_policy()
        assert policy.device == torch.device("cpu")
        assert trainer.train()["timesteps_total"] >= 64
    finally:
        trainer.stop()


def test_with_cuda_the_learner_takes_it_and_rollout_workers_only_when_given_gpus(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert learner_device({"num_gpus": 0.5}) == torch.device("cuda")
    assert learner_device({"num_gpus": 0.5, "worker_index": 0}) == torch.device("cuda")
    assert learner_device({"num_gpus": 0}) == torch.device("cpu")
    # a remote rollout worker: its own num_gpus_per_worker, not the trainer's num_gpus
    assert learner_device({"num_gpus": 1, "worker_index": 2}) == torch.device("cpu")
    both = {"num_gpus": 1, "num_gpus_per_worker": 0.1, "worker_index": 2}
    assert learner_device(both) == torch.device("cuda")


def test_a_policy_built_for_a_gpu_without_one_learns_on_the_cpu(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    from rayfield.rllib.agents.qmix.qmix import DEFAULT_CONFIG
    from rayfield.rllib.agents.qmix.qmix_policy import QMixTorchPolicy
    from rayfield.rllib.models.preprocessors import get_preprocessor

    original = gym.spaces.Tuple([gym.spaces.Discrete(6)] * 2)
    flat = get_preprocessor(original)(original).observation_space
    acts = gym.spaces.Tuple([gym.spaces.Discrete(2)] * 2)
    config = QMixTrainer.merge_trainer_configs(DEFAULT_CONFIG, {"num_gpus": 0.5})
    policy = QMixTorchPolicy(flat, acts, config)
    assert policy.device == torch.device("cpu")
    assert all(p.device.type == "cpu" for p in policy.target_model.parameters())
