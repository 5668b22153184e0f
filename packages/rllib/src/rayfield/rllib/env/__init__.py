"""Environments: `EnvContext`, `MultiAgentEnv`, `register_env`."""

from __future__ import annotations

from rayfield.rllib.env.env_context import EnvContext
from rayfield.rllib.env.multi_agent_env import MultiAgentEnv
from rayfield.rllib.env.registry import get_env_creator, register_env

__all__ = ["EnvContext", "MultiAgentEnv", "get_env_creator", "register_env"]
