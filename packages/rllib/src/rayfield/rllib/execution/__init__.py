"""Execution building blocks: replay buffers and segment trees."""

from __future__ import annotations

from rayfield.rllib.execution.replay_buffer import PrioritizedReplayBuffer, ReplayBuffer

__all__ = ["PrioritizedReplayBuffer", "ReplayBuffer"]
