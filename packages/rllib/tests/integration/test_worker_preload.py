"""A trainer that starts the local cluster itself asks for the worker preload: its rollout
workers are forked from the node's preloading fork server, not started by the driver."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

import rayfield as rf
from rayfield.rllib.agents.ppo import PPOTrainer


def test_a_trainer_that_starts_the_cluster_forks_its_workers_with_torch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rayfield_leak_check: Any
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the session goes there
    monkeypatch.delenv("RAYFIELD_WORKER_PRELOAD_MODULES", raising=False)
    assert not rf.is_initialized()
    config = {
        "num_workers": 1,
        "num_envs_per_worker": 1,
        "rollout_fragment_length": 8,
        "train_batch_size": 8,
        "sgd_minibatch_size": 8,
        "num_sgd_iter": 1,
    }
    trainer = PPOTrainer(env="CartPole-v1", config=config)
    try:
        (worker,) = trainer.workers.remote_workers()
        ppid, preloaded = rf.get(
            worker.apply.remote(lambda w: (os.getppid(), "torch" in sys.modules))
        )
        assert ppid != os.getpid() and preloaded  # forked by the zygote, not the driver
        assert trainer.train()["timesteps_total"] >= 8
    finally:
        trainer.stop()
    assert not rf.is_initialized()
