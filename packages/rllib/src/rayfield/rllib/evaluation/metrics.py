"""Episode statistics for the result dict (`summarize_episodes`)."""

from __future__ import annotations

import collections
import math
from collections.abc import Iterable
from typing import Any

import numpy as np

from rayfield.rllib.evaluation.episode import RolloutMetrics


def summarize_episodes(episodes: Iterable[RolloutMetrics]) -> dict[str, Any]:
    """Reward and length statistics over `episodes` (NaN when there are none), the
    mean return per policy (``policy_reward_mean``: the sum over the agents each
    policy controlled, averaged over the episodes it acted in), and the mean, min and
    max of every custom metric."""
    episodes = list(episodes)
    rewards = np.array([e.episode_reward for e in episodes], dtype=np.float64)
    lengths = np.array([e.episode_length for e in episodes], dtype=np.float64)
    custom: dict[str, list[float]] = collections.defaultdict(list)
    for e in episodes:
        for k, v in e.custom_metrics.items():
            custom[k].append(float(v))
    custom_out = {}
    for k, vals in custom.items():
        custom_out[f"{k}_mean"] = float(np.mean(vals))
        custom_out[f"{k}_min"] = float(np.min(vals))
        custom_out[f"{k}_max"] = float(np.max(vals))
    nan = math.nan
    per_policy: dict[str, list[float]] = collections.defaultdict(list)
    for e in episodes:
        sums: dict[str, float] = collections.defaultdict(float)
        for key, r in e.agent_rewards.items():
            sums[key[1] if isinstance(key, tuple) else str(key)] += float(r)
        for pid, r in sums.items():
            per_policy[pid].append(r)
    if per_policy:
        policy_reward_mean = {pid: float(np.mean(v)) for pid, v in per_policy.items()}
    else:
        policy_reward_mean = {"default_policy": float(rewards.mean())} if len(rewards) else {}
    return {
        "episode_reward_max": float(rewards.max()) if len(rewards) else nan,
        "episode_reward_min": float(rewards.min()) if len(rewards) else nan,
        "episode_reward_mean": float(rewards.mean()) if len(rewards) else nan,
        "episode_len_mean": float(lengths.mean()) if len(lengths) else nan,
        "policy_reward_mean": policy_reward_mean,
        "custom_metrics": custom_out,
        "hist_stats": {
            "episode_reward": rewards.tolist(),
            "episode_lengths": lengths.astype(int).tolist(),
        },
    }
