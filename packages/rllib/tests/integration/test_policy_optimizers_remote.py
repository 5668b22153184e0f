"""`AsyncGradientsOptimizer` with remote rollout workers: gradients in flight across
steps, worker failures, and the 0.5/0.6 ``foreach_evaluator`` name on a trainer's
optimizer."""

from __future__ import annotations

from typing import Any

import pytest

import rayfield as rf
from rayfield.rllib.agents.a3c import A3CTrainer
from rayfield.rllib.optimizers import AsyncGradientsOptimizer

CFG = {
    "num_workers": 2,
    "rollout_fragment_length": 10,
    "min_iter_time_s": 0,
    "optimizer": {"grads_per_step": 4},
    "model": {"fcnet_hiddens": [8]},
    "seed": 0,
}


@pytest.mark.parametrize("policy", ["recreate_failed_workers", "ignore_worker_failures"])
def test_async_gradients_survive_a_dead_worker(cluster: Any, policy: str) -> None:
    trainer = A3CTrainer(env="CartPole-v1", config={**CFG, policy: True})
    try:
        opt = trainer.optimizer
        assert isinstance(opt, AsyncGradientsOptimizer)
        r = trainer.train()
        assert r["timesteps_this_iter"] == 4 * 10  # grads_per_step batches of 10 steps
        assert r["info"]["num_steps_trained"] == r["timesteps_total"]
        assert len(opt._inflight) == 2  # both workers compute the next gradients already
        worker_ids = opt.foreach_evaluator_with_index(lambda w, i: (w.worker_index, i))
        assert worker_ids == [(0, 0), (1, 1), (2, 2)]
        rf.kill(trainer.workers.remote_workers()[0])
        # the failure is seen when `rayfield.wait` hands back the dead worker's call,
        # which may come after several gradients of the live worker
        for _ in range(20):
            r = trainer.train()
            assert r["timesteps_this_iter"] == 4 * 10
            if trainer.workers.num_recreated or r["num_healthy_workers"] == 1:
                break
        if policy == "recreate_failed_workers":
            assert r["num_healthy_workers"] == 2 and trainer.workers.num_recreated == 1
            assert len(opt._inflight) == 2  # the new worker was started on a gradient
        else:
            assert r["num_healthy_workers"] == 1 and len(opt._inflight) == 1
    finally:
        trainer.stop()
    assert trainer.optimizer is not None and trainer.optimizer._inflight == {}
