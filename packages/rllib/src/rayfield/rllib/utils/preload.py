"""The worker preload rllib asks for when it starts the local cluster itself.

Rollout workers spend most of their start-up importing torch. When rllib calls
``rayfield.init()`` (a trainer with remote workers and no cluster yet, or ``rllib train
--num-cpus``), it passes ``worker_preload_modules`` so the node's workers are forked from a
process that imported torch, gymnasium, the rollout worker and the policy's module once. A
``RAYFIELD_WORKER_PRELOAD_MODULES`` set by the user wins (set it to ``""`` to turn preload off).
"""

from __future__ import annotations

import os
from typing import Any

__all__ = ["ENV_PRELOAD", "init_options", "worker_preload_modules"]

ENV_PRELOAD = "RAYFIELD_WORKER_PRELOAD_MODULES"  # rayfield's public setting


def worker_preload_modules(policy: Any = None) -> list[str]:
    """The modules a rollout worker imports, for ``policy`` (a class or a dotted path to
    one; None: the modules every rollout worker needs)."""
    modules = ["torch", "gymnasium", "rayfield.rllib.evaluation.rollout_worker"]
    if isinstance(policy, str) and "." in policy:
        modules.append(policy.rpartition(".")[0])
    elif isinstance(policy, type) and policy.__module__ != "__main__":
        modules.append(policy.__module__)
    return modules


def init_options(policy: Any = None) -> dict[str, Any]:
    """Keyword arguments for ``rayfield.init()``: the preload of :func:`worker_preload_modules`,
    or none when ``RAYFIELD_WORKER_PRELOAD_MODULES`` is set (the node reads it)."""
    if ENV_PRELOAD in os.environ:
        return {}
    return {"worker_preload_modules": worker_preload_modules(policy)}
