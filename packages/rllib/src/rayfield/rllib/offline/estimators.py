"""Off-policy estimation: how well the current policy would do, estimated from
episodes that another (behaviour) policy played.

Both estimators are step-wise (per-decision) importance sampling, Precup, Sutton and
Singh (2000), eq. (4) and its weighted form. For an episode of T steps with rewards
``r_t``, behaviour probabilities ``mu_t = action_prob`` (a column of the data) and the
current policy's probabilities ``pi_t`` of the same actions, with
``rho_t = prod_{i <= t} pi_i / mu_i``:

* ``V_prev = sum_t gamma^t r_t`` (the behaviour policy's discounted return);
* IS: ``V_step_IS = sum_t rho_t gamma^t r_t``;
* WIS: ``V_step_WIS = sum_t (rho_t / w_t) gamma^t r_t``, ``w_t`` the mean of
  ``rho_t`` over every episode this estimator has seen (episodes shorter than ``t``
  do not count at ``t``);
* ``V_gain_est = V_new / V_prev`` (above 1: an estimated improvement).

The trainer reports the mean of each metric over the episodes read in an iteration as
``result["off_policy_estimator"][name]`` (``name`` is ``"is"`` / ``"wis"``, or the
key of ``off_policy_estimation_methods``). RLlib 0.7 skips the last step of each
episode; every step counts here.

Sources:
    Precup, Sutton, Singh, "Eligibility Traces for Off-Policy Policy Evaluation",
    ICML 2000.
    RLlib 0.7, "Off-policy estimation" (``input_evaluation: ["is", "wis"]``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rayfield.rllib.policy.sample_batch import SampleBatch

__all__ = [
    "ImportanceSamplingEstimator",
    "OffPolicyEstimate",
    "OffPolicyEstimator",
    "WeightedImportanceSamplingEstimator",
    "summarize_estimates",
]


@dataclass
class OffPolicyEstimate:
    """One episode's estimate: ``estimator_name`` and ``metrics`` (``V_prev``,
    ``V_step_IS`` or ``V_step_WIS``, ``V_gain_est``)."""

    estimator_name: str
    metrics: dict[str, float] = field(default_factory=dict)


class OffPolicyEstimator:
    """The base of the estimators.

    Args:
        policy: the current policy; it must have ``compute_log_likelihoods(actions,
            obs_batch, ...)`` returning ``float[B]`` log-probabilities.
        gamma: the discount, in [0, 1].
        name: the key under which results are reported.

    Raises:
        ValueError: `gamma` out of [0, 1], or a policy without
            ``compute_log_likelihoods`` (set ``input_evaluation: []``).
    """

    default_name = "ope"

    def __init__(self, policy: Any, gamma: float, name: str | None = None) -> None:
        if not 0.0 <= float(gamma) <= 1.0:
            raise ValueError(f"gamma must be in [0, 1], got {gamma}")
        if not hasattr(policy, "compute_log_likelihoods"):
            raise ValueError(
                f"{type(policy).__name__} gives no action probabilities, which off-policy "
                "estimation needs: set input_evaluation: [] (off_policy_estimation_methods: {})"
            )
        self.policy = policy
        self.gamma = float(gamma)
        self.name = name or self.default_name
        self.new_estimates: list[OffPolicyEstimate] = []

    def check_can_estimate_for(self, batch: SampleBatch) -> None:
        """Raises ValueError when `batch` has no ``action_prob`` column."""
        if SampleBatch.ACTION_PROB not in batch:
            raise ValueError(
                "off-policy estimation needs the behaviour policy's 'action_prob' column in "
                "the input data; write it, or set input_evaluation: []"
            )

    def action_prob(self, batch: SampleBatch) -> np.ndarray:
        """``float64[T]``: the current policy's probability of each logged action."""
        state = [batch[k] for k in sorted(batch) if k.startswith("state_in_")]
        logp = self.policy.compute_log_likelihoods(
            batch[SampleBatch.ACTIONS],
            batch[SampleBatch.CUR_OBS],
            state or None,
            batch.get(SampleBatch.PREV_ACTIONS),
            batch.get(SampleBatch.PREV_REWARDS),
        )
        return np.exp(np.asarray(logp, dtype=np.float64))

    def estimate(self, batch: SampleBatch, new_prob: np.ndarray | None = None) -> OffPolicyEstimate:
        """The estimate of one episode (rows of one ``eps_id``).

        Args:
            new_prob: ``float[T]``, the current policy's probabilities of the logged
                actions if already computed (default: computed here).

        Raises:
            ValueError: no ``action_prob`` column.
        """
        self.check_can_estimate_for(batch)
        new = self.action_prob(batch) if new_prob is None else new_prob
        old = np.asarray(batch[SampleBatch.ACTION_PROB], dtype=np.float64)
        rho = np.cumprod(new / np.maximum(old, 1e-12))
        discounted = self.gamma ** np.arange(batch.count) * batch[SampleBatch.REWARDS]
        return self._from_ratios(rho, discounted.astype(np.float64))

    def _from_ratios(self, rho: np.ndarray, discounted: np.ndarray) -> OffPolicyEstimate:
        """The estimate from ``rho_t`` and ``gamma^t r_t`` of one episode."""
        raise NotImplementedError

    def process(self, batch: SampleBatch) -> None:
        """Estimate every episode of `batch` (split by ``eps_id``; the current policy's
        probabilities computed in one pass) and keep them for `get_metrics`.

        Raises:
            ValueError: no ``action_prob`` column.
        """
        self.check_can_estimate_for(batch)
        new = self.action_prob(batch)
        episodes = batch.split_by_episode() if SampleBatch.EPS_ID in batch else [batch]
        start = 0
        for episode in episodes:
            end = start + episode.count
            self.new_estimates.append(self.estimate(episode, new[start:end]))
            start = end

    def get_metrics(self) -> list[OffPolicyEstimate]:
        """The estimates since the last call (and forget them)."""
        out, self.new_estimates = self.new_estimates, []
        return out

    @staticmethod
    def _estimate(name: str, key: str, v_prev: float, v_new: float) -> OffPolicyEstimate:
        gain = v_new / v_prev if v_prev else float("nan")
        return OffPolicyEstimate(name, {"V_prev": v_prev, key: v_new, "V_gain_est": gain})


class ImportanceSamplingEstimator(OffPolicyEstimator):
    """Step-wise importance sampling (see the module docstring)."""

    default_name = "is"

    def _from_ratios(self, rho: np.ndarray, discounted: np.ndarray) -> OffPolicyEstimate:
        return self._estimate(
            self.name, "V_step_IS", float(discounted.sum()), float((rho * discounted).sum())
        )


class WeightedImportanceSamplingEstimator(OffPolicyEstimator):
    """Step-wise weighted importance sampling (see the module docstring)."""

    default_name = "wis"

    def __init__(self, policy: Any, gamma: float, name: str | None = None) -> None:
        super().__init__(policy, gamma, name)
        self.filter_values = np.zeros(0, dtype=np.float64)  # sum of rho_t per t
        self.filter_counts = np.zeros(0, dtype=np.float64)  # episodes that reached t

    def _from_ratios(self, rho: np.ndarray, discounted: np.ndarray) -> OffPolicyEstimate:
        n = len(rho)
        if n > len(self.filter_values):
            grow = n - len(self.filter_values)
            self.filter_values = np.concatenate([self.filter_values, np.zeros(grow)])
            self.filter_counts = np.concatenate([self.filter_counts, np.zeros(grow)])
        self.filter_values[:n] += rho
        self.filter_counts[:n] += 1.0
        w = self.filter_values[:n] / self.filter_counts[:n]
        weighted = np.divide(rho, w, out=np.zeros_like(rho), where=w > 0)
        return self._estimate(
            self.name, "V_step_WIS", float(discounted.sum()), float((weighted * discounted).sum())
        )


def summarize_estimates(estimates: Sequence[Any]) -> dict[str, dict[str, float]]:
    """``{estimator name: {metric: mean over the estimates}}``."""
    acc: dict[str, dict[str, list[float]]] = {}
    for e in estimates:
        per = acc.setdefault(e.estimator_name, {})
        for k, v in e.metrics.items():
            per.setdefault(k, []).append(float(v))
    return {
        name: {k: float(np.nanmean(v)) if v else float("nan") for k, v in metrics.items()}
        for name, metrics in acc.items()
    }
