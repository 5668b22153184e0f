"""V-trace (`agents.impala.vtrace`) against a direct numpy computation of the paper's
definition (Espeholt et al. 2018, eq. 1: the explicit sum, not the recursion), with
clipping, several trajectories in one flat batch, and the on-policy case reducing to
n-step bootstrapped returns."""

from __future__ import annotations

import numpy as np
import pytest

from rayfield.rllib.agents.impala.vtrace import from_importance_weights


def direct_vtrace(log_rhos, discounts, rewards, values, bootstrap, rho_bar, pg_rho_bar, c_bar=1.0):
    """Eq. 1 of the paper for one trajectory of n steps, term by term:
    v_s = V(x_s) + sum_{t=s}^{n-1} (prod_{i<t} gamma_i) (prod_{i=s}^{t-1} c_i) delta_t."""
    n = len(rewards)
    rhos = np.exp(log_rhos)
    v_ext = np.append(values, bootstrap)
    deltas = np.minimum(rho_bar, rhos) * (rewards + discounts * v_ext[1:] - v_ext[:-1])
    cs = np.minimum(c_bar, rhos)
    vs = np.zeros(n)
    for s in range(n):
        total = 0.0
        for t in range(s, n):
            weight = np.prod(discounts[s:t]) * np.prod(cs[s:t])
            total += weight * deltas[t]
        vs[s] = values[s] + total
    vs_ext = np.append(vs, bootstrap)
    pg = np.minimum(pg_rho_bar, rhos) * (rewards + discounts * vs_ext[1:] - values)
    return vs, pg


def random_trajectory(rng, n, terminal=False):
    discounts = np.full(n, 0.9)
    if terminal:
        discounts[-1] = 0.0
    return dict(
        log_rhos=rng.normal(0.0, 0.8, n),  # ratios both above and below the thresholds
        discounts=discounts,
        rewards=rng.normal(size=n),
        values=rng.normal(size=n),
        bootstrap=float(rng.normal()),
    )


@pytest.mark.parametrize(("rho_bar", "pg_rho_bar"), [(1.0, 1.0), (0.7, 1.3), (2.0, 0.5)])
def test_matches_the_papers_sum_with_clipping(rho_bar: float, pg_rho_bar: float) -> None:
    rng = np.random.default_rng(0)
    trajs = [random_trajectory(rng, n, terminal=t) for n, t in ((7, False), (1, True), (5, True))]
    flat = {k: np.concatenate([np.atleast_1d(t[k]) for t in trajs]) for k in trajs[0]}
    lengths = [len(t["rewards"]) for t in trajs]
    ends = np.zeros(sum(lengths), dtype=bool)
    ends[np.cumsum(lengths) - 1] = True
    bootstrap = np.zeros(sum(lengths))
    bootstrap[ends] = flat["bootstrap"]
    got = from_importance_weights(
        flat["log_rhos"],
        flat["discounts"],
        flat["rewards"],
        flat["values"],
        bootstrap,
        ends,
        clip_rho_threshold=rho_bar,
        clip_pg_rho_threshold=pg_rho_bar,
    )
    clipped = np.exp(flat["log_rhos"])
    assert (clipped > max(rho_bar, pg_rho_bar)).any() and (clipped < 1).any()
    start = 0
    for t in trajs:
        n = len(t["rewards"])
        vs, pg = direct_vtrace(**t, rho_bar=rho_bar, pg_rho_bar=pg_rho_bar)
        np.testing.assert_allclose(got.vs[start : start + n], vs, rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(got.pg_advantages[start : start + n], pg, rtol=1e-10)
        start += n


def test_on_policy_is_the_n_step_bootstrapped_return() -> None:
    rng = np.random.default_rng(1)
    n, gamma = 6, 0.95
    rewards, values, boot = rng.normal(size=n), rng.normal(size=n), 1.7
    ends = np.zeros(n, dtype=bool)
    ends[-1] = True
    out = from_importance_weights(
        np.zeros(n), np.full(n, gamma), rewards, values, np.full(n, boot), ends
    )
    for s in range(n):
        k = np.arange(n - s)
        n_step = np.sum(gamma**k * rewards[s:]) + gamma ** (n - s) * boot
        assert out.vs[s] == pytest.approx(n_step, rel=1e-12)
        next_v = out.vs[s + 1] if s + 1 < n else boot
        assert out.pg_advantages[s] == pytest.approx(rewards[s] + gamma * next_v - values[s])


def test_a_terminal_step_does_not_bootstrap() -> None:
    out = from_importance_weights([0.0, 0.0], [0.5, 0.0], [1.0, 2.0], [0.0, 0.0], [0, 99.0], [0, 1])
    np.testing.assert_allclose(out.vs, [1.0 + 0.5 * 2.0, 2.0])


def test_bad_input() -> None:
    with pytest.raises(ValueError, match="one length"):
        from_importance_weights([0.0], [0.9, 0.9], [1.0], [0.0], [0.0], [True])
    with pytest.raises(ValueError, match="ends"):
        from_importance_weights([0.0], [0.9], [1.0], [0.0], [0.0], [False])
