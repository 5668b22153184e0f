"""Environments: `BaseEnv`, `EnvContext`, `ExternalEnv`, `MultiAgentEnv`, `VectorEnv`,
`register_env`."""

from __future__ import annotations

from rayfield.rllib.env.base_env import BaseEnv
from rayfield.rllib.env.env_context import EnvContext
from rayfield.rllib.env.external_env import ExternalEnv, ExternalEnvStopped
from rayfield.rllib.env.multi_agent_env import MultiAgentEnv
from rayfield.rllib.env.registry import get_env_creator, register_env
from rayfield.rllib.env.vector_env import VectorEnv

__all__ = [
    "BaseEnv",
    "EnvContext",
    "ExternalEnv",
    "ExternalEnvStopped",
    "MultiAgentEnv",
    "VectorEnv",
    "get_env_creator",
    "register_env",
]
