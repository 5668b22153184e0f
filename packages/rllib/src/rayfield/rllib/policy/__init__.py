"""Policies and sample batches."""

from __future__ import annotations

from rayfield.rllib.policy.policy import Policy
from rayfield.rllib.policy.sample_batch import DEFAULT_POLICY_ID, MultiAgentBatch, SampleBatch

__all__ = ["DEFAULT_POLICY_ID", "MultiAgentBatch", "Policy", "SampleBatch", "TorchPolicy"]


def __getattr__(name: str) -> object:
    if name == "TorchPolicy":  # imports torch
        from rayfield.rllib.policy.torch_policy import TorchPolicy

        return TorchPolicy
    raise AttributeError(name)
