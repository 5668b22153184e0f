"""V-trace off-policy value targets and policy-gradient advantages, in numpy.

For a trajectory ``x_s, a_s, r_s`` sampled by a behaviour policy ``mu`` and a target
policy ``pi`` with value function ``V``, the paper (section 4.1, eq. 1) defines the
n-step V-trace target of ``V(x_s)``::

    v_s = V(x_s) + sum_{t=s}^{s+n-1} gamma^(t-s) (prod_{i=s}^{t-1} c_i) delta_t V
    delta_t V = rho_t (r_t + gamma V(x_{t+1}) - V(x_t))
    rho_t = min(rho_bar, pi(a_t|x_t) / mu(a_t|x_t)),  c_i = min(c_bar, pi(a_i|x_i) / mu(a_i|x_i))

computed here with the recursion of Remark 1 (section 4.1)::

    v_s - V(x_s) = delta_s V + gamma c_s (v_{s+1} - V(x_{s+1}))

backwards from the end of the trajectory, where ``v_{s+n} = V(x_{s+n})`` (the bootstrap
value). The policy-gradient advantage of section 4.2 is::

    A_s = rho_pg_s (r_s + gamma v_{s+1} - V(x_s)),  rho_pg_s = min(rho_bar_pg, pi/mu)

On-policy (``pi = mu``) with ``rho_bar, c_bar >= 1`` every ratio is 1 and ``v_s`` is the
n-step bootstrapped return ``sum_k gamma^k r_{s+k} + gamma^n V(x_{s+n})``.

Here ``gamma`` is per step (``discounts[t] = gamma * (1 - terminated_t)``, so a terminal
step does not bootstrap), as in DeepMind's reference ``vtrace.py``, and a flat batch may
hold several trajectories back to back: ``ends[t]`` marks the last step of each, and
``bootstrap[t]`` (read only where ``ends[t]``) is ``V(x_{t+1})`` after it.

Source:
    Espeholt, Soyer, Munos, Simonyan, Mnih, Ward, Doron, Firoiu, Harley, Dunning, Legg,
    Kavukcuoglu, "IMPALA: Scalable Distributed Deep-RL with Importance Weighted
    Actor-Learner Architectures", ICML 2018 (arXiv:1802.01561), section 4, eq. 1.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = ["VTraceReturns", "from_importance_weights"]


class VTraceReturns(NamedTuple):
    """``vs``: the V-trace value targets ``v_s``, float64[T]; ``pg_advantages``: the
    policy-gradient advantages ``A_s``, float64[T]."""

    vs: np.ndarray
    pg_advantages: np.ndarray


def from_importance_weights(
    log_rhos: np.ndarray,
    discounts: np.ndarray,
    rewards: np.ndarray,
    values: np.ndarray,
    bootstrap: np.ndarray,
    ends: np.ndarray,
    clip_rho_threshold: float | None = 1.0,
    clip_pg_rho_threshold: float | None = 1.0,
    clip_c_threshold: float = 1.0,
) -> VTraceReturns:
    """V-trace targets and advantages of a flat batch of T steps (see the module docstring).

    Args:
        log_rhos: ``log pi(a_t|x_t) - log mu(a_t|x_t)``, float[T].
        discounts: ``gamma_t``, float[T] (0 after a terminal step).
        rewards: ``r_t``, float[T].
        values: ``V(x_t)``, float[T].
        bootstrap: ``V(x_{t+1})`` where ``ends[t]``, float[T] (other entries unread).
        ends: bool[T], True on the last step of each trajectory; ``ends[-1]`` must be True.
        clip_rho_threshold: ``rho_bar`` (None: no clipping).
        clip_pg_rho_threshold: ``rho_bar_pg`` (None: no clipping).
        clip_c_threshold: ``c_bar`` (1.0 in the paper).

    Returns:
        `VTraceReturns` (float64[T] each).

    Raises:
        ValueError: the arrays' lengths differ, or ``ends[-1]`` is False (the last
            trajectory would have no bootstrap value).
    """
    arrays = [np.asarray(a, dtype=np.float64) for a in (log_rhos, discounts, rewards, values)]
    log_rhos, discounts, rewards, values = arrays
    bootstrap = np.asarray(bootstrap, dtype=np.float64)
    ends = np.asarray(ends, dtype=bool)
    n = len(rewards)
    if any(len(a) != n for a in (log_rhos, discounts, values, bootstrap, ends)):
        raise ValueError("log_rhos, discounts, rewards, values, bootstrap and ends need one length")
    if n and not ends[-1]:
        raise ValueError("ends[-1] must be True: the last trajectory needs its bootstrap value")
    rhos = np.exp(log_rhos)
    clipped_rhos = rhos if clip_rho_threshold is None else np.minimum(clip_rho_threshold, rhos)
    cs = np.minimum(clip_c_threshold, rhos)
    # V(x_{t+1}): the next row's value inside a trajectory, the bootstrap value at its end
    next_values = np.where(ends, bootstrap, np.append(values[1:], 0.0))
    deltas = clipped_rhos * (rewards + discounts * next_values - values)
    carry = np.where(ends, 0.0, discounts * cs)  # gamma c_s, cut at trajectory ends
    vs_minus_v = np.empty(n, dtype=np.float64)
    acc = 0.0
    deltas_l, carry_l = deltas.tolist(), carry.tolist()
    for t in range(n - 1, -1, -1):
        acc = deltas_l[t] + carry_l[t] * acc
        vs_minus_v[t] = acc
    vs = values + vs_minus_v
    next_vs = np.where(ends, bootstrap, np.append(vs[1:], 0.0))
    pg_rhos = rhos if clip_pg_rho_threshold is None else np.minimum(clip_pg_rho_threshold, rhos)
    pg_advantages = pg_rhos * (rewards + discounts * next_vs - values)
    return VTraceReturns(vs=vs, pg_advantages=pg_advantages)
