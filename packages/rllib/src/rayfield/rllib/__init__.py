"""rayfield.rllib: reinforcement learning on rayfield, with RLlib's API, in PyTorch.

    from rayfield.rllib.agents.ppo import PPOTrainer
    trainer = PPOTrainer(env="CartPole-v1", config={"num_workers": 2})
    result = trainer.train()

Names below are imported on first use, so ``import rayfield.rllib`` does not load
torch or gymnasium.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "SampleBatch": "rayfield.rllib.policy.sample_batch",
    "MultiAgentBatch": "rayfield.rllib.policy.sample_batch",
    "DEFAULT_POLICY_ID": "rayfield.rllib.policy.sample_batch",
    "Policy": "rayfield.rllib.policy.policy",
    "TorchPolicy": "rayfield.rllib.policy.torch_policy",
    "RolloutWorker": "rayfield.rllib.evaluation.rollout_worker",
    "WorkerSet": "rayfield.rllib.evaluation.worker_set",
    "EnvContext": "rayfield.rllib.env.env_context",
    "MultiAgentEnv": "rayfield.rllib.env.multi_agent_env",
    "VectorEnv": "rayfield.rllib.env.vector_env",
    "BaseEnv": "rayfield.rllib.env.base_env",
    "register_env": "rayfield.rllib.env.registry",
    "ModelCatalog": "rayfield.rllib.models.catalog",
    "MODEL_DEFAULTS": "rayfield.rllib.models.catalog",
    "Trainer": "rayfield.rllib.agents.trainer",
    "COMMON_CONFIG": "rayfield.rllib.agents.common_config",
    "DefaultCallbacks": "rayfield.rllib.evaluation.callbacks",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value  # later lookups (and `dir`, `vars`) find it directly
        return value
    raise AttributeError(f"module 'rayfield.rllib' has no attribute {name!r}")


__all__ = sorted(_LAZY)
