"""Rollout workers, worker sets, sampling, postprocessing and metrics."""

from __future__ import annotations

from rayfield.rllib.evaluation.episode import Episode, RolloutMetrics
from rayfield.rllib.evaluation.metrics import collect_episodes, collect_metrics, summarize_episodes
from rayfield.rllib.evaluation.postprocessing import Postprocessing, compute_advantages, discount
from rayfield.rllib.evaluation.rollout_worker import RolloutWorker
from rayfield.rllib.evaluation.worker_set import WorkerSet

MultiAgentEpisode = Episode
PolicyEvaluator = RolloutWorker

__all__ = [
    "Episode",
    "MultiAgentEpisode",
    "PolicyEvaluator",
    "Postprocessing",
    "RolloutMetrics",
    "RolloutWorker",
    "WorkerSet",
    "collect_episodes",
    "collect_metrics",
    "compute_advantages",
    "discount",
    "summarize_episodes",
]
