"""BOHB's model-based sampler: a kernel density estimate per budget (numpy only).

``TuneBOHB`` proposes configs as the BOHB paper's sampler does. Every config is mapped to
the unit cube (log scale for log domains, category index for choices). For each budget
(``hyperband_info["budget"]`` set by :class:`~rayfield.tune.schedulers.HyperBandForBOHB`,
else the result's ``training_iteration``) it keeps each trial's latest loss. Once the
largest budget has at least ``min_points_in_model`` + 2 observations, it splits them into
the best ``top_n_percent`` and the rest, fits a product-kernel density to each (Gaussian
kernels for numeric dimensions, Aitchison-Aitken kernels for choices, bandwidths by Scott's
rule floored at ``min_bandwidth``), draws ``num_samples`` candidates from the good density
with its bandwidths widened by ``bandwidth_factor`` and returns the one that maximises
``l(x) / g(x)``. A ``random_fraction`` of suggestions, and all of them before a model
exists, are drawn uniformly at random.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from rayfield.tune.pickles import dump_data
from rayfield.tune.search.gp import UnitCubeSearcher, _domains, _Param
from rayfield.tune.search.sample import Categorical
from rayfield.tune.search.searcher import restore_state

__all__ = ["TuneBOHB"]

_DEFAULTS = {
    "min_points_in_model": None,
    "top_n_percent": 15,
    "num_samples": 64,
    "random_fraction": 1 / 3,
    "bandwidth_factor": 3.0,
    "min_bandwidth": 1e-3,
}


class _KDE:
    """A product-kernel density over the unit cube; ``levels[j]`` > 0 marks dimension ``j``
    as a choice among that many categories (values encoded as their index)."""

    def __init__(self, data: np.ndarray, levels: np.ndarray, min_bandwidth: float) -> None:
        self.data, self.levels = data, levels
        n, d = data.shape
        scott = n ** (-1.0 / (d + 4))
        bw = np.maximum(data.std(axis=0) * scott, min_bandwidth)
        # A choice's bandwidth is the chance of leaving its value, at most (k - 1) / k.
        cat = levels > 0
        bw[cat] = np.minimum(bw[cat], (levels[cat] - 1) / np.maximum(levels[cat], 1))
        self.bw = bw

    def pdf(self, x: np.ndarray) -> np.ndarray:
        """Density at each row of ``x`` (shape (m, d)); returns shape (m,)."""
        diff = x[:, None, :] - self.data[None, :, :]
        cat = self.levels > 0
        k = np.empty_like(diff)
        num = ~cat
        z = diff[:, :, num] / self.bw[num]
        k[:, :, num] = np.exp(-0.5 * z**2) / (self.bw[num] * math.sqrt(2 * math.pi))
        if cat.any():
            same = np.abs(diff[:, :, cat]) < 0.5
            lam = self.bw[cat]
            k[:, :, cat] = np.where(same, 1.0 - lam, lam / np.maximum(self.levels[cat] - 1, 1))
        return np.asarray(np.prod(k, axis=2).mean(axis=1))

    def sample(self, rng: np.random.Generator, count: int, widen: float) -> np.ndarray:
        """``count`` draws around random data points, bandwidths times ``widen``."""
        centres = self.data[rng.integers(0, len(self.data), count)]
        out = centres.copy()
        cat = self.levels > 0
        num = ~cat
        if num.any():
            noise = rng.normal(0.0, 1.0, (count, int(num.sum()))) * self.bw[num] * widen
            out[:, num] = _reflect(centres[:, num] + noise)
        for j in np.flatnonzero(cat):
            k = int(self.levels[j])
            move = rng.random(count) < min(self.bw[j] * widen, (k - 1) / k)
            out[move, j] = rng.integers(0, k, int(move.sum()))
        return out


def _reflect(u: np.ndarray) -> np.ndarray:
    """Fold values into [0, 1] by reflection at the bounds."""
    u = np.mod(u, 2.0)
    return np.where(u > 1.0, 2.0 - u, u)


class TuneBOHB(UnitCubeSearcher):
    """The BOHB sampler: a density model per budget of good and bad configs.

    Use it with :class:`~rayfield.tune.schedulers.HyperBandForBOHB`, which tells it each
    result's budget; with any other scheduler a result's budget is its
    ``training_iteration``.

    Args:
        space: ``{name: domain}`` (nested dicts allowed; uniform, loguniform, randint,
            choice and their quantised forms); None takes the domains of the
            experiment's config.
        bohb_config: overrides of the paper's settings: ``min_points_in_model`` (default
            number of dimensions + 1), ``top_n_percent`` (15), ``num_samples`` (64
            candidates per suggestion), ``random_fraction`` (1/3), ``bandwidth_factor`` (3)
            and ``min_bandwidth`` (1e-3, in unit-cube units).
        max_concurrent: accepted for the classic signature; wrap the searcher in
            :class:`~rayfield.tune.search.ConcurrencyLimiter` to limit concurrency.
        metric, mode: what to optimise.
        points_to_evaluate: configs (``{name: value}``, nested or ``"a/b"`` keys) tried
            first.
        seed: random seed.

    Raises:
        ValueError: an unknown ``bohb_config`` key, a domain it cannot model (normal,
            sample_from), or no domain at all when the first config is asked for.

    Sources:
        Falkner, Klein and Hutter, "BOHB: Robust and Efficient Hyperparameter Optimization
        at Scale", ICML 2018, Algorithm 2 (model-based sampling) and section 3.1.
    """

    def __init__(
        self,
        space: dict[str, Any] | None = None,
        bohb_config: dict[str, Any] | None = None,
        max_concurrent: int = 10,
        metric: str | None = None,
        mode: str | None = None,
        points_to_evaluate: list[dict[str, Any]] | None = None,
        seed: int | None = None,
    ) -> None:
        super().__init__(metric, mode)
        unknown = set(bohb_config or {}) - set(_DEFAULTS)
        if unknown:
            raise ValueError(
                f"unknown bohb_config keys {sorted(unknown)}; known: {sorted(_DEFAULTS)}"
            )
        self.settings = {**_DEFAULTS, **(bohb_config or {})}
        self.max_concurrent = max_concurrent
        self._params: list[_Param] = _domains(space) if space else []
        self._points = [dict(p) for p in points_to_evaluate or []]
        self._rng = np.random.default_rng(seed)
        self._live: dict[str, np.ndarray] = {}
        # budget -> {trial_id: (unit-cube point, loss)}; losses are minimised.
        self._observations: dict[float, dict[str, tuple[np.ndarray, float]]] = {}
        self.model_budget: float | None = None

    # -- encoding ------------------------------------------------------------------------
    def _levels(self) -> np.ndarray:
        return np.array(
            [
                len(p.domain.categories) if isinstance(p.domain, Categorical) else 0
                for p in self._params
            ],
            dtype=float,
        )

    def _decode(self, point: np.ndarray) -> dict[str, Any]:
        config: dict[str, Any] = {}
        for param, value in zip(self._params, point):
            node = config
            for key in param.path[:-1]:
                node = node.setdefault(key, {})
            if isinstance(param.domain, Categorical):
                node[param.path[-1]] = param.domain.categories[int(value)]
            else:
                node[param.path[-1]] = param.decode(float(value))
        return config

    def _encode(self, config: dict[str, Any]) -> np.ndarray:
        out = []
        nested = self._given_config(config)
        for param in self._params:
            value: Any = nested
            for key in param.path:
                value = value[key]
            d = param.domain
            if isinstance(d, Categorical):
                out.append(float(d.categories.index(value)))
            elif d.sampler == "loguniform":
                lo, hi = math.log(float(d.lower)), math.log(float(d.upper))
                out.append((math.log(float(value)) - lo) / (hi - lo))
            else:
                out.append((float(value) - float(d.lower)) / (float(d.upper) - float(d.lower)))
        return np.array(out)

    def _given_config(self, given: dict[str, Any]) -> dict[str, Any]:
        """A ``points_to_evaluate`` entry (nested, or with ``"a/b"`` keys) as a nested
        config, values exactly as given."""
        config: dict[str, Any] = {}
        for param in self._params:
            value: Any = given.get("/".join(param.path))
            if value is None:
                value = given
                for key in param.path:
                    value = value[key]
            node = config
            for key in param.path[:-1]:
                node = node.setdefault(key, {})
            node[param.path[-1]] = value
        return config

    def _random_point(self) -> np.ndarray:
        levels = self._levels()
        point = self._rng.random(len(levels))
        cat = levels > 0
        point[cat] = np.floor(point[cat] * levels[cat])
        return point

    # -- the model -----------------------------------------------------------------------
    def _min_points(self) -> int:
        given = self.settings["min_points_in_model"]
        return int(given) if given is not None else len(self._params) + 1

    def _model_point(self) -> np.ndarray | None:
        """The sampler's pick from the largest budget with enough observations."""
        need = self._min_points() + 2
        budgets = [b for b, obs in self._observations.items() if len(obs) >= need]
        if not budgets:
            self.model_budget = None
            return None
        self.model_budget = max(budgets)
        points = list(self._observations[self.model_budget].values())
        x = np.array([p for p, _ in points])
        losses = np.array([loss for _, loss in points])
        order = np.argsort(losses)
        n_good = max(self._min_points(), len(x) * int(self.settings["top_n_percent"]) // 100)
        n_bad = max(self._min_points(), len(x) - n_good)
        levels = self._levels()
        floor = float(self.settings["min_bandwidth"])
        good = _KDE(x[order[:n_good]], levels, floor)
        bad = _KDE(x[order[-n_bad:]], levels, floor)
        candidates = good.sample(
            self._rng, int(self.settings["num_samples"]), float(self.settings["bandwidth_factor"])
        )
        ratio = np.maximum(good.pdf(candidates), 1e-32) / np.maximum(bad.pdf(candidates), 1e-32)
        return np.asarray(candidates[int(np.argmax(ratio))])

    # -- Searcher ------------------------------------------------------------------------
    def suggest(self, trial_id: str) -> dict[str, Any] | None:
        if not self._params:
            raise ValueError("TuneBOHB has no search space: pass space= or domains in config")
        if self._points:
            given = self._points.pop(0)
            point = self._encode(given)
            self._live[trial_id] = point
            return self._given_config(given)
        else:
            point = None
            if self._rng.random() >= float(self.settings["random_fraction"]):
                point = self._model_point()
            if point is None:
                point = self._random_point()
        self._live[trial_id] = point
        return self._decode(point)

    def _record(self, trial_id: str, result: dict[str, Any]) -> None:
        point = self._live.get(trial_id)
        score = self.score(result)
        if point is None or score is None or not math.isfinite(score):
            return
        info = result.get("hyperband_info") or {}
        budget = info.get("budget", result.get("training_iteration"))
        if budget is None:
            return
        # The searcher maximises score; the model ranks losses.
        self._observations.setdefault(float(budget), {})[trial_id] = (point, -score)

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        self._record(trial_id, result)

    def on_trial_complete(
        self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False
    ) -> None:
        if result and not error:
            self._record(trial_id, result)
        self._live.pop(trial_id, None)

    def save(self, checkpoint_path: str) -> None:
        """Write the observations per budget, the points left to evaluate and the random
        state to ``checkpoint_path`` (mode 0600): JSON, or a pickle when
        ``points_to_evaluate`` holds values JSON cannot.

        Raises:
            UnsafeFileError: the file's directory is not this user's alone.
        """
        observations = [
            [budget, {tid: [[float(x) for x in p], float(loss)] for tid, (p, loss) in obs.items()}]
            for budget, obs in self._observations.items()
        ]
        state = {
            "observations": observations,
            "points": self._points,
            "rng": self._rng.bit_generator.state,
        }
        dump_data(checkpoint_path, state)

    def restore(self, checkpoint_path: str, *, trusted: bool = False) -> None:
        """Load what :meth:`save` wrote.

        Args:
            checkpoint_path: the file.
            trusted: the file is yours: a pickled state may be loaded.

        Raises:
            UntrustedPickleError: the state is a pickle and ``trusted`` is False.
            UnsafeFileError: the file is not this user's alone.
            TuneError: the file does not hold a searcher's state.
        """
        state = restore_state(checkpoint_path, trusted, "TuneBOHB")
        saved = state["observations"]
        pairs = saved.items() if isinstance(saved, dict) else saved  # a pickle of 0.1.0
        self._observations = {
            float(budget): {t: (np.asarray(p, dtype=float), loss) for t, (p, loss) in obs.items()}
            for budget, obs in pairs
        }
        self._points = state["points"]
        self._rng.bit_generator.state = state["rng"]
