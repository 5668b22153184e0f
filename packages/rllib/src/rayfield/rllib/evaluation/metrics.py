"""Episode statistics for the result dict: `summarize_episodes` over the
`RolloutMetrics` of finished episodes, and `collect_episodes` / `collect_metrics`,
which gather them from a local rollout worker and remote ones (RLlib's
``ray.rllib.evaluation.metrics``), for trainers that drive their own workers."""

from __future__ import annotations

import collections
import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from rayfield.rllib.evaluation.episode import RolloutMetrics
from rayfield.rllib.offline.estimators import OffPolicyEstimate, summarize_estimates


def summarize_episodes(
    episodes: Iterable[RolloutMetrics],
    new_episodes: Iterable[RolloutMetrics] | None = None,
    num_dropped: int = 0,
) -> dict[str, Any]:
    """Statistics of finished episodes, as the result dict reports them.

    Args:
        episodes: the episodes to average over (e.g. the last
            ``metrics_smoothing_episodes``).
        new_episodes: those of them that are new this iteration (default: all of
            `episodes`); only their count is used.
        num_dropped: metric batches lost (workers that did not answer in time).

    Returns:
        ``episode_reward_{mean,min,max}`` and ``episode_len_mean`` (NaN when there are
        no episodes); ``policy_reward_mean`` (per policy: the sum over the agents it
        controlled, averaged over the episodes it acted in); ``custom_metrics`` (the
        mean, min and max of every custom metric as ``<name>_mean``...);
        ``hist_stats`` (``episode_reward`` and ``episode_lengths`` lists);
        ``episodes_this_iter`` (``len(new_episodes)``) and
        ``num_metric_batches_dropped``.

    Raises:
        TypeError: an item that is not a `RolloutMetrics`.
    """
    episodes = list(episodes)
    for e in episodes:
        if not isinstance(e, RolloutMetrics):
            raise TypeError(
                f"summarize_episodes takes RolloutMetrics, got {type(e).__name__}: keep "
                "off-policy estimates apart (see collect_episodes)"
            )
    new_count = len(episodes) if new_episodes is None else len(list(new_episodes))
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
        "episodes_this_iter": new_count,
        "num_metric_batches_dropped": int(num_dropped),
    }


def collect_episodes(
    local_worker: Any = None,
    remote_workers: Sequence[Any] = (),
    timeout_seconds: float = 180,
) -> tuple[list[RolloutMetrics], list[OffPolicyEstimate], int]:
    """Take the metrics the workers gathered since they were last asked (each worker's
    ``get_metrics``, which forgets them): ``(episodes, off-policy estimates, number of
    remote workers that did not answer within timeout_seconds)``.

    Args:
        local_worker: a `RolloutWorker` in this process (None: none).
        remote_workers: `RolloutWorker` actors; asked all at once.
        timeout_seconds: how long to wait for the remote workers together.

    Raises:
        TimeoutError: there are remote workers and none answered in time (raise
            ``collect_metrics_timeout`` or look for a hung worker).
    """
    lists: list[list[Any]] = []
    dropped = 0
    if remote_workers:
        import rayfield

        pending = [w.get_metrics.remote() for w in remote_workers]
        ready, _ = rayfield.wait(pending, num_returns=len(pending), timeout=timeout_seconds)
        if not ready:
            raise TimeoutError(
                f"no metrics from any of {len(pending)} remote workers within "
                f"{timeout_seconds} s: a worker may hang; the trainer's wait is "
                "collect_metrics_timeout"
            )
        dropped = len(pending) - len(ready)
        lists.extend(rayfield.get(ready))
    if local_worker is not None:
        lists.append(local_worker.get_metrics())
    episodes = [m for ms in lists for m in ms if isinstance(m, RolloutMetrics)]
    estimates = [m for ms in lists for m in ms if isinstance(m, OffPolicyEstimate)]
    return episodes, estimates, dropped


def collect_metrics(
    local_worker: Any = None,
    remote_workers: Sequence[Any] = (),
    timeout_seconds: float = 180,
) -> dict[str, Any]:
    """`collect_episodes` then `summarize_episodes` over the episodes collected, plus
    ``off_policy_estimator`` (per estimator, the mean of each of its statistics over
    the estimates collected).

    Note that this takes the workers' metrics: a trainer that reports episodes itself
    (every built-in one) does not see the episodes taken here.

    Raises:
        TimeoutError: see `collect_episodes`.
    """
    episodes, estimates, dropped = collect_episodes(local_worker, remote_workers, timeout_seconds)
    result = summarize_episodes(episodes, episodes, dropped)
    result["off_policy_estimator"] = summarize_estimates(estimates)
    return result
