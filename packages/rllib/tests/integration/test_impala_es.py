"""IMPALA / APPO / ES / ARS wiring: two remote rollout workers on a 2-CPU runtime with
the learner thread in the driver, sample calls in flight, weight broadcasts, replay,
the shared noise table read zero-copy by the ES workers, checkpoints and config errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

import rayfield as rf
from rayfield.rllib.agents.ars import ARSTrainer
from rayfield.rllib.agents.es import ESTrainer
from rayfield.rllib.agents.impala import ImpalaTrainer
from rayfield.rllib.agents.ppo import APPOTrainer
from rayfield.rllib.algorithms.appo import APPOConfig
from rayfield.rllib.algorithms.impala import IMPALAConfig

TUNED = Path(__file__).resolve().parents[2] / "tuned_examples"


def tuned(name: str) -> dict[str, Any]:
    (exp,) = yaml.safe_load((TUNED / f"{name}.yaml").read_text()).values()
    return dict(exp["config"])


def test_impala_two_workers_on_two_cpus_learn_asynchronously(cluster: Any) -> None:
    assert rf.cluster_resources()["CPU"] == 2
    config = {**tuned("cartpole-impala"), "min_iter_time_s": 0, "timesteps_per_iteration": 2000}
    trainer = ImpalaTrainer(env="CartPole-v1", config={**config, "seed": 0})
    try:
        opt = trainer.optimizer
        assert opt is not None and opt.learner is not None and opt.learner.is_alive()
        result = trainer.train()
        # two sample calls in flight per worker between steps
        assert len(opt._inflight) == 4
        assert sorted(id(w) for w in opt._inflight.values()) == sorted(
            2 * [id(w) for w in trainer.workers.remote_workers()]
        )
        while result["timesteps_total"] < 20_000 and result["episode_reward_mean"] < 45:
            result = trainer.train()
        assert result["episode_reward_mean"] >= 45  # random play: ~22
        stats = opt.stats()
        assert stats["num_weight_broadcasts"] > 0
        assert 0 < result["info"]["num_steps_trained"] <= result["timesteps_total"]
        assert "mean_rho" in result["info"]["learner"]["default_policy"]
    finally:
        trainer.stop()
    assert not trainer.optimizer.learner.is_alive()  # type: ignore[union-attr]


def test_es_workers_read_the_noise_table_zero_copy(cluster: Any) -> None:
    config = {**tuned("cartpole-es"), "noise_size": 1_000_000, "seed": 0}
    trainer = ESTrainer(env="CartPole-v1", config=config)
    try:
        flags = rf.get(
            [
                w.apply.remote(
                    lambda w: (w.noise.noise.flags.writeable, w.noise.noise.flags.owndata)
                )
                for w in trainer.workers.remote_workers()
            ]
        )
        assert flags == [(False, False), (False, False)]  # store views, not copies
        result = trainer.train()
        assert result["timesteps_total"] >= config["train_batch_size"]
        assert result["episodes_this_iter"] >= config["episodes_per_batch"]
        # the workers' observation statistics were merged into the driver's filter
        assert trainer.workers.local_worker().filter.rs.n >= result["timesteps_total"] // 2
    finally:
        trainer.stop()


def test_replay_proportion_feeds_replayed_batches_to_the_learner() -> None:
    config = {
        "num_workers": 0,
        "rollout_fragment_length": 10,
        "train_batch_size": 10,
        "replay_proportion": 1.0,
        "replay_buffer_num_slots": 4,
        "num_sgd_iter": 2,
        "min_iter_time_s": 0,
        "model": {"fcnet_hiddens": [8]},
        "seed": 0,
    }
    trainer = APPOTrainer(env="CartPole-v1", config=config)
    try:
        for _ in range(5):
            result = trainer.train()
        # every new batch but the first (nothing kept yet) is followed by one replayed
        # batch; each train batch is learned on twice
        sampled = result["timesteps_total"]
        assert result["info"]["num_steps_trained"] == 2 * (2 * sampled - 10)
        assert len(trainer.optimizer.replay.slots) == 4  # type: ignore[union-attr]
    finally:
        trainer.stop()


def test_ray2_config_builders_and_cli_names() -> None:
    algo = IMPALAConfig().environment("CartPole-v1").env_runners(num_env_runners=0).build()
    try:
        assert isinstance(algo, ImpalaTrainer) and algo.config["vtrace"] is True
    finally:
        algo.stop()
    cfg = APPOConfig().training(clip_param=0.2).to_dict()
    assert cfg["clip_param"] == 0.2 and cfg["replay_buffer_num_slots"] == 100


def test_es_and_ars_checkpoints_restore_the_parameters(tmp_path: Path) -> None:
    for cls, extra in (
        (ESTrainer, {"episodes_per_batch": 4, "train_batch_size": 10}),
        (
            ARSTrainer,
            {"num_rollouts": 4, "rollouts_used": 2},
        ),
    ):
        config = {"num_workers": 0, "noise_size": 100_000, "seed": 0, **extra}
        trainer = cls(env="CartPole-v1", config=config)
        trainer.train()
        path = trainer.save(str(tmp_path / cls._name))
        theta = trainer.workers.local_worker().theta.copy()
        action = trainer.compute_action(np.zeros(4))
        trainer.stop()
        again = cls.from_checkpoint(path)
        try:
            np.testing.assert_array_equal(again.workers.local_worker().theta, theta)
            assert again.compute_action(np.zeros(4)) == action
            assert again.iteration == 1
        finally:
            again.stop()


@pytest.mark.parametrize(
    ("cls", "config", "match"),
    [
        (ImpalaTrainer, {"replay_proportion": 0.5}, "replay_buffer_num_slots"),
        (ImpalaTrainer, {"num_sgd_iter": 0}, "num_sgd_iter"),
        (ImpalaTrainer, {"opt_type": "sgd"}, "opt_type"),
        (ImpalaTrainer, {"model": {"use_lstm": True}}, "use_lstm"),
        (APPOTrainer, {"clip_param": 0.0}, "clip_param"),
        (ESTrainer, {"noise_stdev": 0.0, "noise_size": 1000}, "noise_stdev"),
        (ESTrainer, {"evaluation_interval": 1, "noise_size": 1000}, "eval_prob"),
        (ARSTrainer, {"num_rollouts": 4, "rollouts_used": 8}, "rollouts_used"),
        (ARSTrainer, {"policy_type": "Deep"}, "policy_type"),
    ],
)
def test_bad_configs_say_what_to_fix(cls: type, config: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        cls(env="CartPole-v1", config={"num_workers": 0, **config})
