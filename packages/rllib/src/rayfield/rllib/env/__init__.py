"""Environments: `BaseEnv`, `EnvContext`, `ExternalEnv`, `ExternalMultiAgentEnv`,
`MultiAgentEnv`, `VectorEnv`, `register_env`."""

from __future__ import annotations

from rayfield.rllib.env.base_env import BaseEnv
from rayfield.rllib.env.env_context import EnvContext
from rayfield.rllib.env.external_env import ExternalEnv, ExternalEnvStopped
from rayfield.rllib.env.external_multi_agent_env import ExternalMultiAgentEnv
from rayfield.rllib.env.multi_agent_env import MultiAgentEnv
from rayfield.rllib.env.registry import get_env_creator, register_env
from rayfield.rllib.env.vector_env import VectorEnv

__all__ = [
    "BaseEnv",
    "EnvContext",
    "ExternalEnv",
    "ExternalEnvStopped",
    "ExternalMultiAgentEnv",
    "MultiAgentEnv",
    "VectorEnv",
    "get_env_creator",
    "register_env",
]
