"""Advantage estimation for trajectory fragments.

`compute_advantages` turns one fragment of one episode into per-step advantages and
value targets, either with generalised advantage estimation (GAE) or with plain
discounted returns (REINFORCE-style).

Sources:
    Schulman, Moritz, Levine, Jordan, Abbeel, "High-Dimensional Continuous Control
    Using Generalized Advantage Estimation", ICLR 2016 (arXiv:1506.02438), eq. 16.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rayfield.rllib.policy.sample_batch import SampleBatch


class Postprocessing:
    """Names of the columns that postprocessing adds."""

    ADVANTAGES = "advantages"
    VALUE_TARGETS = "value_targets"


def discount(x: np.ndarray, gamma: float) -> np.ndarray:
    """Reverse discounted cumulative sum: ``y[t] = sum_k gamma**k * x[t + k]``.

    Args:
        x: float[T].
        gamma: the discount, in [0, 1].

    Returns:
        float64[T].
    """
    out = np.empty(len(x), dtype=np.float64)
    acc = 0.0
    for t in range(len(x) - 1, -1, -1):
        acc = float(x[t]) + gamma * acc
        out[t] = acc
    return out


def compute_advantages(
    rollout: SampleBatch,
    last_r: float,
    gamma: float = 0.9,
    lambda_: float = 1.0,
    use_gae: bool = True,
    use_critic: bool = True,
) -> SampleBatch:
    """Add ``advantages`` and ``value_targets`` (float32[T]) to a one-episode fragment.

    With GAE: ``delta_t = r_t + gamma * V(s_{t+1}) - V(s_t)`` with ``V`` from the
    ``vf_preds`` column and ``last_r`` after the last step; ``advantages`` is the
    ``gamma * lambda_`` discounted sum of the deltas and ``value_targets = advantages
    + vf_preds``. Without GAE: ``advantages`` is the discounted return of the rewards
    followed by ``last_r``; ``value_targets`` is that same return when
    ``use_critic`` (so a critic can regress on it) and zeros otherwise, and with a
    critic the advantages have ``vf_preds`` subtracted.

    Args:
        rollout: one fragment of one episode, with ``rewards`` (and ``vf_preds`` for
            GAE or a critic).
        last_r: the value after the last step: 0.0 if the fragment ends in a
            terminal state, else the value estimate of the last ``new_obs``.
        gamma: discount factor in [0, 1].
        lambda_: GAE parameter in [0, 1].
        use_gae: use GAE (needs ``vf_preds``).
        use_critic: without GAE, subtract ``vf_preds`` as a baseline.

    Returns:
        The same batch, with the two columns added.

    Raises:
        KeyError: GAE or a critic is asked for and the batch has no ``vf_preds``.
    """
    rewards = rollout[SampleBatch.REWARDS].astype(np.float64)
    if use_gae:
        vf = rollout[SampleBatch.VF_PREDS].astype(np.float64)
        vpred = np.append(vf, last_r)
        delta = rewards + gamma * vpred[1:] - vpred[:-1]
        adv = discount(delta, gamma * lambda_)
        rollout[Postprocessing.ADVANTAGES] = adv.astype(np.float32)
        rollout[Postprocessing.VALUE_TARGETS] = (adv + vf).astype(np.float32)
    else:
        returns = discount(np.append(rewards, last_r), gamma)[:-1]
        if use_critic:
            vf = rollout[SampleBatch.VF_PREDS].astype(np.float64)
            rollout[Postprocessing.ADVANTAGES] = (returns - vf).astype(np.float32)
            rollout[Postprocessing.VALUE_TARGETS] = returns.astype(np.float32)
        else:
            rollout[Postprocessing.ADVANTAGES] = returns.astype(np.float32)
            rollout[Postprocessing.VALUE_TARGETS] = np.zeros_like(returns, dtype=np.float32)
    return rollout


def compute_gae_for_sample_batch(policy: Any, sample_batch: SampleBatch) -> SampleBatch:
    """`compute_advantages` with the policy's config (``gamma``, ``lambda``,
    ``use_gae``, ``use_critic``), bootstrapping from ``policy.value(new_obs[-1])``
    unless the fragment ends in a terminal state (PPO, A2C). A recurrent policy
    bootstraps with the state after the last step (``state_out_<i>``) and the last
    action and reward as the previous ones."""
    if sample_batch[SampleBatch.TERMINATEDS][-1]:
        last_r = 0.0
    elif "state_out_0" in sample_batch:
        states: list[np.ndarray] = []
        while f"state_out_{len(states)}" in sample_batch:
            states.append(sample_batch[f"state_out_{len(states)}"][-1:])
        last_r = float(
            policy.value(
                sample_batch[SampleBatch.NEXT_OBS][-1:],
                states,
                sample_batch[SampleBatch.ACTIONS][-1:],
                sample_batch[SampleBatch.REWARDS][-1:],
            )[0]
        )
    else:
        last_r = float(policy.value(sample_batch[SampleBatch.NEXT_OBS][-1:])[0])
    cfg = policy.config
    return compute_advantages(
        sample_batch,
        last_r,
        cfg["gamma"],
        cfg["lambda"],
        use_gae=cfg["use_gae"],
        use_critic=cfg.get("use_critic", True),
    )
