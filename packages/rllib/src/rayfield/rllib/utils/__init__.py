"""Utilities: config merging, filters, schedules; `PolicyClient` and `PolicyServer` under
RLlib's classic names (``ray.rllib.utils.PolicyClient``), imported on first use."""

from __future__ import annotations

from typing import Any

from rayfield.rllib.utils.config import deep_update, merge_dicts
from rayfield.rllib.utils.filter import MeanStdFilter, NoFilter, RunningStat

__all__ = [
    "MeanStdFilter",
    "NoFilter",
    "PolicyClient",
    "PolicyServer",
    "RunningStat",
    "deep_update",
    "merge_dicts",
]


def __getattr__(name: str) -> Any:
    if name == "PolicyClient":
        from rayfield.rllib.env.policy_client import PolicyClient

        return PolicyClient
    if name == "PolicyServer":
        from rayfield.rllib.env.policy_server import PolicyServer

        return PolicyServer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
