"""Rollout workers as rayfield actors: sampling, weight broadcast, filters, failures."""

from __future__ import annotations

import queue
import subprocess
import sys
import threading
import time
from typing import Any

import numpy as np
import pytest

import rayfield as rf
from rayfield.exceptions import RayfieldError
from rayfield.rllib.agents.a3c import A3CTrainer
from rayfield.rllib.agents.ppo import PPOTrainer

CFG = {
    "num_workers": 2,
    "rollout_fragment_length": 25,
    "train_batch_size": 100,
    "sgd_minibatch_size": 50,
    "num_sgd_iter": 1,
    "model": {"fcnet_hiddens": [8]},
    "seed": 0,
}


def test_remote_sampling_weights_and_filters(cluster: Any) -> None:
    trainer = PPOTrainer(env="CartPole-v1", config={**CFG, "observation_filter": "MeanStdFilter"})
    try:
        r = trainer.train()
        assert r["num_healthy_workers"] == 2
        assert r["timesteps_total"] == 100  # 2 workers x 25 steps, twice
        local = trainer.get_weights()["default_policy"]
        remote = rf.get([w.get_weights.remote() for w in trainer.workers.remote_workers()])
        for weights in remote:
            for k, v in local.items():
                assert np.array_equal(weights["default_policy"][k], v)
        indices = trainer.workers.foreach_worker_with_index(lambda w, i: (w.worker_index, i))
        assert indices == [(0, 0), (1, 1), (2, 2)]
        # the local filter holds every observation the remote workers saw
        n = trainer.workers.local_worker().filters["default_policy"].rs.n
        assert n >= 100
        remote_n = trainer.workers.foreach_worker(lambda w: w.filters["default_policy"].rs.n)
        assert remote_n[1] == remote_n[2] == n
        # without ignore_worker_failures / recreate_failed_workers a dead worker is an error
        _kill_first_worker(trainer)
        with pytest.raises(RayfieldError):
            trainer.train()
    finally:
        trainer.stop()


def _kill_first_worker(trainer: PPOTrainer) -> None:
    victim = trainer.workers.remote_workers()[0]
    rf.kill(victim)


def test_workers_are_ready_with_the_learners_weights_when_the_trainer_is_built(
    cluster: Any,
) -> None:
    trainer = PPOTrainer(env="CartPole-v1", config=CFG)
    try:
        local = trainer.get_weights()["default_policy"]
        remote = rf.get([w.get_weights.remote() for w in trainer.workers.remote_workers()])
        for weights in remote:  # the first samples come from the learner's weights
            for k, v in local.items():
                assert np.array_equal(weights["default_policy"][k], v)
        # only the learner builds an optimizer: sampling workers need none
        built = trainer.workers.foreach_worker(lambda w: w.policy._optimizer is not None)
        assert built == [True, False, False]
    finally:
        trainer.stop()


def test_ignore_worker_failures_with_pipelined_sampling(cluster: Any) -> None:
    cfg = {**CFG, "ignore_worker_failures": True, "sample_async": True}
    trainer = PPOTrainer(env="CartPole-v1", config=cfg)
    try:
        trainer.train()
        _kill_first_worker(trainer)
        r = trainer.train()
        assert r["num_healthy_workers"] == 1
        assert r["timesteps_this_iter"] >= 100
    finally:
        trainer.stop()


def test_recreate_failed_workers(cluster: Any) -> None:
    trainer = PPOTrainer(env="CartPole-v1", config={**CFG, "recreate_failed_workers": True})
    try:
        trainer.train()
        _kill_first_worker(trainer)
        trainer.train()
        r = trainer.train()
        assert r["num_healthy_workers"] == 2
        assert trainer.workers.num_recreated == 1
        indices = trainer.workers.foreach_worker_with_index(lambda w, i: w.worker_index)
        assert sorted(indices) == [0, 1, 2]
    finally:
        trainer.stop()


def test_a3c_learns_with_async_gradients(cluster: Any) -> None:
    """Two workers send gradients; the driver applies each and answers with weights."""
    cfg = {
        "num_workers": 2,
        "num_envs_per_worker": 8,
        "rollout_fragment_length": 10,
        "lr": 1e-3,
        "entropy_coeff": 0.0,
        "min_iter_time_s": 0,
        "optimizer": {"grads_per_step": 20},
        "model": {"fcnet_hiddens": [64]},
        "seed": 0,
    }
    trainer = A3CTrainer(env="CartPole-v1", config=cfg)
    try:
        while True:
            r = trainer.train()
            if r["episode_reward_mean"] >= 100 or r["timesteps_total"] >= 60_000:
                break
    finally:
        trainer.stop()
    assert r["episode_reward_mean"] >= 100, r["timesteps_total"]
    assert r["info"]["num_steps_trained"] == r["timesteps_total"]
    assert {"policy_loss", "vf_loss", "policy_entropy"} <= set(
        r["info"]["learner"]["default_policy"]
    )


def test_more_workers_than_the_cluster_fits_warns_while_it_waits() -> None:
    """A trainer whose workers cannot all start (3 one-CPU workers, 2 CPUs) says so at
    once instead of waiting in silence; it keeps waiting, since nodes may still join."""
    code = (
        "import rayfield as rf\n"
        "from rayfield.rllib.agents.pg import PGTrainer\n"
        "rf.init(num_cpus=2)\n"
        "PGTrainer(env='CartPole-v1', config={'num_workers': 3})\n"
        "print('built')\n"
    )
    seen = _lines_until(code, "rollout workers need")
    warning = seen[-1]
    assert "3 rollout workers need 3 CPU (the cluster has 2)" in warning
    assert "built\n" not in seen


def test_es_with_its_ten_default_workers_on_two_cpus_warns_while_it_waits() -> None:
    """ES and ARS start their own workers (not a `WorkerSet`): the same warning."""
    code = (
        "import rayfield as rf\n"
        "from rayfield.rllib.agents.es import ESTrainer\n"
        "rf.init(num_cpus=2)\n"
        "ESTrainer(env='CartPole-v1', config={'noise_size': 1000}).train()\n"
        "print('trained')\n"
    )
    seen = _lines_until(code, "rollout workers need")
    assert "10 rollout workers need 10 CPU (the cluster has 2)" in seen[-1]
    assert "trained\n" not in seen


def test_workers_waiting_for_cpus_other_trainers_hold_are_named_at_once() -> None:
    """A second trainer whose worker needs the CPU a first trainer's workers hold."""
    code = (
        "import rayfield as rf\n"
        "from rayfield.rllib.agents.pg import PGTrainer\n"
        "rf.init(num_cpus=2)\n"
        "first = PGTrainer(env='CartPole-v1', config={'num_workers': 2})\n"
        "print('first built', flush=True)\n"
        "PGTrainer(env='CartPole-v1', config={'num_workers': 1})\n"
        "print('second built', flush=True)\n"
    )
    seen = _lines_until(code, "rollout workers need")
    assert "first built\n" in seen and "second built\n" not in seen
    assert "1 CPU (0 of the cluster's 2 are free now" in seen[-1]


def _lines_until(code: str, needle: str, timeout_s: float = 90.0) -> list[str]:
    """Run ``code`` in a fresh interpreter; its output lines up to the first containing
    ``needle``, after which the process is killed."""
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(
        target=lambda: [lines.put(line) for line in proc.stdout or []], daemon=True
    ).start()
    seen: list[str] = []
    try:
        deadline = time.monotonic() + timeout_s
        while not seen or needle not in seen[-1]:
            seen.append(lines.get(timeout=max(0.1, deadline - time.monotonic())))
    finally:
        proc.kill()
        proc.wait()
    return seen


@rf.remote(num_cpus=1)
class _TrainerHost:
    """A trainer in bundle 0 of a group (no capture): its WorkerSet places the workers."""

    def worker_groups(self) -> list[Any]:
        from rayfield.rllib.agents.pg import PGTrainer
        from rayfield.util import get_current_placement_group

        def group(_worker: Any) -> str | None:
            g = get_current_placement_group()
            return None if g is None else g.id.hex()

        config = {**CFG, "num_workers": 1}
        del config["sgd_minibatch_size"], config["num_sgd_iter"]  # PPO's, not PG's
        trainer = PGTrainer(env="CartPole-v1", config=config)
        try:
            trainer.train()
            return rf.get([w.apply.remote(group) for w in trainer.workers.remote_workers()])
        finally:
            trainer.stop()


def test_remote_workers_start_in_the_trainers_placement_group(cluster: Any) -> None:
    from rayfield.util import placement_group, remove_placement_group
    from rayfield.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    # The group takes both CPUs: a worker placed outside it could never start.
    pg = placement_group([{"CPU": 1}, {"CPU": 1}])
    try:
        host = _TrainerHost.options(
            scheduling_strategy=PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=0)
        ).remote()
        assert rf.get(host.worker_groups.remote(), timeout=120) == [pg.id.hex()]
    finally:
        remove_placement_group(pg)
