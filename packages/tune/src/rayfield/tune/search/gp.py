"""Built-in Bayesian optimisation: a Gaussian process with expected improvement (numpy only).

Each parameter is mapped to [0, 1] (log scale for log domains, category index for
choices). After ``n_initial_points`` random configs, the next config maximises the expected
improvement of a GP (Matern 5/2 kernel, length scale picked by marginal likelihood) fitted
to the completed trials' scores, over random candidates and perturbations of the best
points so far.
"""

from __future__ import annotations

import math
import random
from typing import Any

import numpy as np

from rayfield.tune.search.sample import Categorical, Domain, Float, Integer
from rayfield.tune.search.searcher import Searcher

__all__ = ["GPSearch", "UnitCubeSearcher", "expected_improvement"]

_LENGTH_SCALES = (0.05, 0.1, 0.2, 0.35, 0.6, 1.0)


def _matern52(a: np.ndarray, b: np.ndarray, scale: float) -> np.ndarray:
    d = np.sqrt(np.maximum(((a[:, None, :] - b[None, :, :]) ** 2).sum(-1), 0.0)) / scale
    s5 = math.sqrt(5.0) * d
    return (1.0 + s5 + 5.0 / 3.0 * d**2) * np.exp(-s5)


class _GP:
    """GP regression on standardised targets with a fixed small noise."""

    def __init__(self, x: np.ndarray, y: np.ndarray, noise: float = 1e-6) -> None:
        self.mean, self.std = float(y.mean()), float(y.std() or 1.0)
        self.x, z = x, (y - self.mean) / self.std
        best: tuple[float, Any] | None = None
        for scale in _LENGTH_SCALES:
            k = _matern52(x, x, scale) + noise * np.eye(len(x))
            try:
                chol = np.linalg.cholesky(k)
            except np.linalg.LinAlgError:
                continue
            alpha = np.linalg.solve(chol.T, np.linalg.solve(chol, z))
            loglik = -0.5 * float(z @ alpha) - float(np.log(np.diag(chol)).sum())
            if best is None or loglik > best[0]:
                best = (loglik, (scale, chol, alpha))
        if best is None:
            raise np.linalg.LinAlgError("the kernel matrix is not positive definite")
        self.scale, self.chol, self.alpha = best[1]

    def predict(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        ks = _matern52(x, self.x, self.scale)
        mu = ks @ self.alpha
        v = np.linalg.solve(self.chol, ks.T)
        var = np.maximum(1.0 - (v**2).sum(0), 1e-12)
        return mu * self.std + self.mean, np.sqrt(var) * self.std


def expected_improvement(mu: np.ndarray, sigma: np.ndarray, best: float, xi: float) -> np.ndarray:
    """E[max(f - best - xi, 0)] for f ~ N(mu, sigma**2) (maximisation)."""
    z = (mu - best - xi) / sigma
    cdf = 0.5 * (1.0 + np.vectorize(math.erf)(z / math.sqrt(2.0)))
    pdf = np.exp(-0.5 * z**2) / math.sqrt(2.0 * math.pi)
    return (mu - best - xi) * cdf + sigma * pdf


class _Param:
    """One dimension: a domain and its map to and from [0, 1]."""

    def __init__(self, path: tuple[str, ...], domain: Domain) -> None:
        if not isinstance(domain, (Float, Integer, Categorical)) or (
            isinstance(domain, Float) and domain.sampler == "normal"
        ):
            raise ValueError(
                f"GPSearch supports uniform, loguniform, randint and choice domains; "
                f"{'/'.join(path)} is {domain!r}"
            )
        self.path, self.domain = path, domain

    def decode(self, u: float) -> Any:
        d = self.domain
        u = min(max(u, 0.0), 1.0)
        if isinstance(d, Categorical):
            return d.categories[min(int(u * len(d.categories)), len(d.categories) - 1)]
        lo, hi = float(d.lower), float(d.upper)
        if d.sampler == "loguniform":
            value = math.exp(math.log(lo) + u * (math.log(hi) - math.log(lo)))
        else:
            value = lo + u * (hi - lo)
        if d.q is not None:
            value = round(value / d.q) * d.q
        if isinstance(d, Integer):
            return min(max(round(value), d.lower), d.upper - 1 if d.q is None else d.upper)
        return value


def _domains(config: dict[str, Any], prefix: tuple[str, ...] = ()) -> list[_Param]:
    out = []
    for key, value in config.items():
        if isinstance(value, dict):
            out += _domains(value, (*prefix, key))
        elif isinstance(value, Domain):
            out.append(_Param((*prefix, key), value))
        elif (
            isinstance(value, tuple)
            and len(value) == 2
            and all(isinstance(v, (int, float)) for v in value)
        ):  # the classic BayesOptSearch form: (low, high) is a uniform range
            out.append(_Param((*prefix, key), Float(float(value[0]), float(value[1]))))
    return out


class UnitCubeSearcher(Searcher):
    """A searcher over the unit cube of ``_params`` (taken from the experiment's config
    when no space was given)."""

    _params: list[_Param]

    def set_search_properties(
        self, metric: str | None, mode: str | None, config: dict[str, Any]
    ) -> bool:
        if not self._params and config:
            self._params = _domains(config)
        return super().set_search_properties(metric, mode, config)


class GPSearch(UnitCubeSearcher):
    """Bayesian optimisation with a Gaussian process and expected improvement.

    Args:
        space: ``{name: domain}`` or, as in the classic ``BayesOptSearch``,
            ``{name: (low, high)}`` (nested dicts allowed); None takes the domains of the
            experiment's config.
        metric, mode: what to optimise.
        n_initial_points: random configs before the GP is used.
        xi: exploration margin of the expected improvement (in metric units, scaled by
            the scores' standard deviation).
        utility_kwargs: the classic ``{"kind": "ei" | "ucb", "kappa": k, "xi": x}``:
            ``"ucb"`` maximises ``mu + kappa * sigma`` instead of the expected
            improvement; ``xi`` replaces the argument above.
        num_candidates: random candidates scored per suggestion.
        random_state: seed.

    Raises:
        ValueError: a domain it cannot model (normal, sample_from), or no domain at all
            when the first config is asked for.

    Sources:
        Jones, Schonlau and Welch, "Efficient Global Optimization of Expensive Black-Box
        Functions", J. Global Optimization 13, 1998 (expected improvement);
        Snoek, Larochelle and Adams, "Practical Bayesian Optimization of Machine Learning
        Algorithms", NeurIPS 2012 (GP with a Matern 5/2 kernel).
    """

    def __init__(
        self,
        space: dict[str, Any] | None = None,
        metric: str | None = None,
        mode: str | None = None,
        n_initial_points: int = 5,
        xi: float = 0.01,
        num_candidates: int = 1000,
        random_state: int | None = None,
        utility_kwargs: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(metric, mode)
        utility = dict(utility_kwargs or {})
        self.kind = str(utility.get("kind", "ei")).lower()
        if self.kind not in ("ei", "ucb"):
            raise ValueError(f"utility kind must be 'ei' or 'ucb', got {self.kind!r}")
        self.kappa = float(utility.get("kappa", 2.576))
        xi = float(utility.get("xi", xi))
        self._params = _domains(space) if space else []
        self.n_initial_points = max(1, n_initial_points)
        self.xi = xi
        self.num_candidates = num_candidates
        self._rng = random.Random(random_state)
        self._np_rng = np.random.default_rng(random_state)
        self._live: dict[str, list[float]] = {}
        self._x: list[list[float]] = []
        self._y: list[float] = []

    def suggest(self, trial_id: str) -> dict[str, Any] | None:
        if not self._params:
            raise ValueError("GPSearch has no search space: pass space= or domains in config")
        if len(self._y) < self.n_initial_points:
            u = [self._rng.random() for _ in self._params]
        else:
            u = self._maximise_ei()
        self._live[trial_id] = u
        config: dict[str, Any] = {}
        for param, value in zip(self._params, u):
            node = config
            for key in param.path[:-1]:
                node = node.setdefault(key, {})
            node[param.path[-1]] = param.decode(value)
        return config

    def _maximise_ei(self) -> list[float]:
        x, y = np.array(self._x), np.array(self._y)
        gp = _GP(x, y)
        dims = len(self._params)
        top = x[np.argsort(y)[-3:]]
        local = np.clip(
            np.repeat(top, 50, axis=0) + self._np_rng.normal(0, 0.05, (len(top) * 50, dims)),
            0.0,
            1.0,
        )
        candidates = np.vstack([self._np_rng.random((self.num_candidates, dims)), local])
        mu, sigma = gp.predict(candidates)
        if self.kind == "ucb":
            utility = mu + self.kappa * sigma
        else:
            utility = expected_improvement(mu, sigma, float(y.max()), self.xi * gp.std)
        return [float(v) for v in candidates[int(np.argmax(utility))]]

    def on_trial_complete(
        self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False
    ) -> None:
        u = self._live.pop(trial_id, None)
        score = self.score(result or {})
        if u is None or error or score is None or not math.isfinite(score):
            return
        self._x.append(u)
        self._y.append(score)
