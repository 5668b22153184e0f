"""``BayesOptSearch``: the ``bayesian-optimization`` package (a Gaussian process with an
acquisition function) as a Tune searcher (``pip install 'rayfield-tune[bayesopt]'``).

The built-in :class:`~rayfield.tune.search.gp.GPSearch` (numpy only) is also importable
from here, as before.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from rayfield.tune.pickles import dump_data
from rayfield.tune.search.gp import GPSearch, expected_improvement
from rayfield.tune.search.sample import Domain, Float, Integer
from rayfield.tune.search.searcher import Searcher, restore_state

__all__ = ["BayesOptSearch", "GPSearch", "expected_improvement"]


class _Dim:
    """One parameter: its bounds in the optimiser's space and the map back."""

    def __init__(self, path: tuple[str, ...], value: Any) -> None:
        self.path, self.log, self.integer, self.q = path, False, False, None
        if isinstance(value, tuple):  # the classic {name: (low, high)} form
            low, high = float(value[0]), float(value[1])
        elif isinstance(value, (Float, Integer)) and value.sampler in ("uniform", "loguniform"):
            low, high = float(value.lower), float(value.upper)
            self.integer, self.q = isinstance(value, Integer), value.q
            if isinstance(value, Integer) and value.q is None:
                high -= 1  # randint's upper bound is exclusive
            if value.sampler == "loguniform":
                self.log, low, high = True, math.log(low), math.log(high)
        else:
            raise ValueError(
                f"BayesOptSearch models uniform, loguniform and integer ranges and (low, "
                f"high) tuples; {'/'.join(path)} is {value!r} (use GPSearch, OptunaSearch "
                f"or HyperOptSearch for choices)"
            )
        self.bounds = (low, high)
        self.name = "/".join(path)

    def decode(self, x: float) -> Any:
        value = math.exp(x) if self.log else x
        if self.q is not None:
            value = round(value / self.q) * self.q
        return round(value) if self.integer else float(value)

    def encode(self, value: Any) -> float:
        return math.log(float(value)) if self.log else float(value)


def _dims(space: dict[str, Any], prefix: tuple[str, ...] = ()) -> list[_Dim]:
    out = []
    for key, value in space.items():
        if isinstance(value, dict):
            out += _dims(value, (*prefix, key))
        elif isinstance(value, (Float, Integer)) or (
            isinstance(value, tuple)
            and len(value) == 2
            and all(isinstance(v, (int, float)) for v in value)
        ):
            out.append(_Dim((*prefix, key), value))
        elif isinstance(value, Domain):
            out.append(_Dim((*prefix, key), value))  # raises: a domain it cannot model
    return out


def _acquisition(bayes_opt: Any, kind: str, kappa: float, xi: float) -> Any:
    """The acquisition object of bayesian-optimization >= 2, or its 1.x UtilityFunction."""
    try:
        from bayes_opt import acquisition
    except ImportError:
        return bayes_opt.UtilityFunction(kind=kind, kappa=kappa, xi=xi)
    if kind == "ucb":
        return acquisition.UpperConfidenceBound(kappa=kappa)
    if kind == "ei":
        return acquisition.ExpectedImprovement(xi=xi)
    return acquisition.ProbabilityOfImprovement(xi=xi)


class BayesOptSearch(Searcher):
    """Bayesian optimisation with the ``bayesian-optimization`` package.

    The package's GP (Matern 2.5 kernel) is fitted to the finished trials' scores; each
    suggestion maximises the acquisition function (upper confidence bound by default).
    Log domains are searched in log space and integers are rounded. After
    ``random_search_steps`` random configs the model proposes the rest.

    Args:
        space: ``{name: domain}`` (uniform, loguniform, randint and their quantised
            forms) or the classic ``{name: (low, high)}``; nested dicts allowed. None
            takes the domains of the experiment's config.
        metric, mode: what to optimise (the package maximises; ``"min"`` is negated).
        points_to_evaluate: configs tried first (nested or ``"a/b"`` keys).
        utility_kwargs: ``{"kind": "ucb" | "ei" | "poi", "kappa": 2.576, "xi": 0.0}``.
        random_state: seed of the package's optimiser and of the random steps.
        random_search_steps: random configs before the model is used (at least 1).
        max_concurrent, reward_attr: accepted for the classic signature (wrap the searcher
            in :class:`~rayfield.tune.search.ConcurrencyLimiter` to limit concurrency;
            ``reward_attr`` is ``metric`` with mode ``"max"``).
        verbose: the package's own printing (0: none).

    Raises:
        ImportError: bayesian-optimization is not installed.
        ValueError: an unknown utility kind, a domain it cannot model (choice, normal),
            or no domain at all when the first config is asked for.

    Sources:
        Snoek, Larochelle and Adams, "Practical Bayesian Optimization of Machine Learning
        Algorithms", NeurIPS 2012; Srinivas et al., "Gaussian Process Optimization in the
        Bandit Setting: No Regret and Experimental Design", ICML 2010 (UCB); the
        bayesian-optimization package, F. Nogueira, https://github.com/bayesian-optimization.
    """

    def __init__(
        self,
        space: dict[str, Any] | None = None,
        metric: str | None = None,
        mode: str | None = None,
        points_to_evaluate: list[dict[str, Any]] | None = None,
        utility_kwargs: dict[str, Any] | None = None,
        random_state: int | None = 42,
        random_search_steps: int = 10,
        verbose: int = 0,
        max_concurrent: int | None = None,
        reward_attr: str | None = None,
    ) -> None:
        try:
            import bayes_opt
        except ImportError as exc:
            raise ImportError(
                "BayesOptSearch needs bayesian-optimization: pip install "
                "'rayfield-tune[bayesopt]' (or use the built-in GPSearch)"
            ) from exc
        if reward_attr is not None:
            metric, mode = reward_attr, "max"
        super().__init__(metric, mode)
        utility = {"kind": "ucb", "kappa": 2.576, "xi": 0.0, **(utility_kwargs or {})}
        kind = str(utility["kind"]).lower()
        if kind not in ("ucb", "ei", "poi"):
            raise ValueError(f"utility kind must be 'ucb', 'ei' or 'poi', got {kind!r}")
        self._bayes_opt = bayes_opt
        self._modern = _has_acquisition_module()
        self._utility = _acquisition(bayes_opt, kind, float(utility["kappa"]), float(utility["xi"]))
        self._seed = random_state
        self._rng = np.random.default_rng(random_state)
        self.random_search_steps = max(1, random_search_steps)
        self.verbose = verbose
        self.max_concurrent = max_concurrent
        self._points = [dict(p) for p in points_to_evaluate or []]
        self._dims: list[_Dim] = _dims(space) if space else []
        self._optimizer: Any = None
        self._live: dict[str, dict[str, float]] = {}
        self._suggested = 0
        self._observed: list[tuple[dict[str, float], float]] = []

    def set_search_properties(
        self, metric: str | None, mode: str | None, config: dict[str, Any]
    ) -> bool:
        if not self._dims and config:
            self._dims = _dims(config)
        return super().set_search_properties(metric, mode, config)

    def _get_optimizer(self) -> Any:
        if self._optimizer is None:
            if not self._dims:
                raise ValueError(
                    "BayesOptSearch has no search space: pass space= or domains in config"
                )
            bounds = {d.name: d.bounds for d in self._dims}
            kwargs: dict[str, Any] = {"random_state": self._seed, "verbose": self.verbose}
            if self._modern:  # >= 2 takes the acquisition at construction
                kwargs["acquisition_function"] = self._utility
            self._optimizer = self._bayes_opt.BayesianOptimization(
                f=None, pbounds=bounds, allow_duplicate_points=True, **kwargs
            )
        return self._optimizer

    def _config(self, params: dict[str, float]) -> dict[str, Any]:
        config: dict[str, Any] = {}
        for d in self._dims:
            node = config
            for key in d.path[:-1]:
                node = node.setdefault(key, {})
            node[d.path[-1]] = d.decode(params[d.name])
        return config

    def suggest(self, trial_id: str) -> dict[str, Any] | None:
        optimizer = self._get_optimizer()
        if self._points:
            given = self._points.pop(0)
            params = {}
            for d in self._dims:
                value: Any = given.get(d.name)
                if value is None:
                    value = given
                    for key in d.path:
                        value = value[key]
                params[d.name] = d.encode(value)
        elif self._suggested < self.random_search_steps or not len(optimizer.space):
            params = {d.name: float(self._rng.uniform(*d.bounds)) for d in self._dims}
        elif self._modern:
            params = dict(optimizer.suggest())
        else:
            params = dict(optimizer.suggest(self._utility))
        self._suggested += 1
        self._live[trial_id] = params
        return self._config(params)

    def on_trial_complete(
        self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False
    ) -> None:
        params = self._live.pop(trial_id, None)
        score = self.score(result or {})
        if params is None or error or score is None or not math.isfinite(score):
            return
        self._get_optimizer().register(params=params, target=score)
        self._observed.append((params, score))

    def save(self, checkpoint_path: str) -> None:
        """Write the observations, the points left to evaluate and the random state to
        ``checkpoint_path`` (mode 0600): JSON, or a pickle when ``points_to_evaluate``
        holds values JSON cannot.

        Raises:
            UnsafeFileError: the file's directory is not this user's alone.
        """
        observed = [[{k: float(v) for k, v in p.items()}, float(s)] for p, s in self._observed]
        state = {
            "observed": observed,
            "points": self._points,
            "suggested": self._suggested,
            "rng": self._rng.bit_generator.state,
        }
        dump_data(checkpoint_path, state)

    def restore(self, checkpoint_path: str, *, trusted: bool = False) -> None:
        """Load what :meth:`save` wrote; the optimiser is refitted to the observations.

        Args:
            checkpoint_path: the file.
            trusted: the file is yours: a pickled state may be loaded.

        Raises:
            UntrustedPickleError: the state is a pickle and ``trusted`` is False.
            UnsafeFileError: the file is not this user's alone.
            TuneError: the file does not hold a searcher's state.
        """
        state = restore_state(checkpoint_path, trusted, "BayesOptSearch")
        self._optimizer = None
        self._observed = []
        for params, score in state["observed"]:
            self._get_optimizer().register(params=params, target=score)
            self._observed.append((params, score))
        self._points, self._suggested = state["points"], state["suggested"]
        self._rng.bit_generator.state = state["rng"]


def _has_acquisition_module() -> bool:
    try:
        from bayes_opt import acquisition  # noqa: F401
    except ImportError:
        return False
    return True
