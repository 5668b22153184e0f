"""IMPALA (classic API): ``from rayfield.rllib.agents.impala import ImpalaTrainer``."""

from __future__ import annotations

from typing import Any

from rayfield.rllib.agents.impala.impala import (
    DEFAULT_CONFIG,
    IMPALA,
    Impala,
    ImpalaAgent,
    ImpalaTrainer,
)


def __getattr__(name: str) -> Any:
    """`VTraceTorchPolicy` loads torch: imported on first use."""
    if name == "VTraceTorchPolicy":
        from rayfield.rllib.agents.impala import vtrace_torch_policy

        return vtrace_torch_policy.VTraceTorchPolicy
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["DEFAULT_CONFIG", "IMPALA", "Impala", "ImpalaAgent", "ImpalaTrainer"]
