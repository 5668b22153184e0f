"""``SkOptSearch``: scikit-optimize's ask/tell ``Optimizer`` as a Tune searcher.

Needs ``pip install rayfield-tune[skopt]``. Either give an ``skopt.Optimizer`` with the
``parameter_names`` of its dimensions (the classic form), or a space of Tune domains (or
skopt dimensions) from which an optimiser is built. skopt minimises: ``max`` is negated.
"""

from __future__ import annotations

import math
from typing import Any

from rayfield.tune.search.sample import Categorical, Domain, Float, Integer
from rayfield.tune.search.searcher import Searcher

__all__ = ["SkOptSearch"]


def _import_skopt() -> Any:
    try:
        import skopt
    except ImportError:
        raise ImportError(
            "SkOptSearch needs scikit-optimize: pip install 'rayfield-tune[skopt]'"
        ) from None
    return skopt


def _dimension(skopt: Any, name: str, value: Any) -> Any:
    space = skopt.space
    if isinstance(value, Categorical):
        return space.Categorical(value.categories, name=name)
    if isinstance(value, Float) and value.sampler != "normal":
        prior = "log-uniform" if value.sampler == "loguniform" else "uniform"
        return space.Real(value.lower, value.upper, prior=prior, name=name)
    if isinstance(value, Integer):
        prior = "log-uniform" if value.sampler == "loguniform" else "uniform"
        return space.Integer(value.lower, value.upper - 1, prior=prior, name=name)
    if isinstance(value, Domain):
        raise ValueError(f"SkOptSearch cannot model {name} = {value!r}")
    return value  # already an skopt dimension or a (low, high) tuple


class SkOptSearch(Searcher):
    """Suggest configs with a scikit-optimize ``Optimizer`` (Bayesian optimisation).

    Args:
        optimizer: an ``skopt.Optimizer``; needs ``parameter_names``. None: built from
            ``space``.
        parameter_names: the config keys of the optimiser's dimensions, in order.
        space: ``{name: Tune domain or skopt dimension}``, when no optimiser is given;
            None takes the domains of the experiment's config.
        metric, mode: what to optimise.
        points_to_evaluate: lists of values (in ``parameter_names`` order) run first.
        evaluated_rewards: the known results of ``points_to_evaluate``: told to the
            optimiser at once, without running those points.
        random_state: seed of a built optimiser.

    Raises:
        ImportError: scikit-optimize is not installed.
        ValueError: an optimiser without ``parameter_names``, or rewards whose number
            differs from the points'.

    Sources:
        Head et al., "scikit-optimize", Zenodo, 2018; Snoek, Larochelle and Adams,
        "Practical Bayesian Optimization of Machine Learning Algorithms", NeurIPS 2012.
    """

    def __init__(
        self,
        optimizer: Any = None,
        parameter_names: list[str] | None = None,
        space: dict[str, Any] | None = None,
        metric: str | None = None,
        mode: str | None = None,
        points_to_evaluate: list[list[Any]] | None = None,
        evaluated_rewards: list[float] | None = None,
        random_state: int | None = None,
    ) -> None:
        super().__init__(metric, mode)
        self._skopt = _import_skopt()
        if optimizer is not None and not parameter_names:
            raise ValueError("SkOptSearch(optimizer=...) needs parameter_names")
        if evaluated_rewards is not None and len(evaluated_rewards) != len(
            points_to_evaluate or []
        ):
            raise ValueError("evaluated_rewards must have one reward per point_to_evaluate")
        self._opt = optimizer
        self._names = list(parameter_names or [])
        self._random_state = random_state
        self._points = list(points_to_evaluate or [])
        self._rewards = evaluated_rewards
        if self._opt is None and space:
            self._build(space)
        self._live: dict[str, list[Any]] = {}

    def _build(self, space: dict[str, Any]) -> None:
        dims = {
            k: v for k, v in space.items() if isinstance(v, (Domain, tuple)) or hasattr(v, "rvs")
        }
        self._names = list(dims)
        self._opt = self._skopt.Optimizer(
            [_dimension(self._skopt, k, v) for k, v in dims.items()],
            n_initial_points=5,
            acq_optimizer="sampling",
            random_state=self._random_state,
        )

    def _tell_known(self) -> None:
        if self._rewards is not None and self._points:
            signed = [-r if self.mode != "min" else r for r in self._rewards]
            self._opt.tell([list(p) for p in self._points], signed)
            self._points, self._rewards = [], None

    def set_search_properties(
        self, metric: str | None, mode: str | None, config: dict[str, Any]
    ) -> bool:
        if self._opt is None and config:
            self._build(config)
        return super().set_search_properties(metric, mode, config)

    def suggest(self, trial_id: str) -> dict[str, Any] | None:
        if self._opt is None:
            raise ValueError("SkOptSearch has no search space: pass optimizer= or space=")
        self._tell_known()
        point = list(self._points.pop(0)) if self._points else self._opt.ask()
        self._live[trial_id] = point
        return {name: _plain(v) for name, v in zip(self._names, point)}

    def on_trial_complete(
        self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False
    ) -> None:
        point = self._live.pop(trial_id, None)
        score = self.score(result or {})
        if point is None or error or score is None or not math.isfinite(score):
            return
        self._opt.tell(point, -score)


def _plain(value: Any) -> Any:
    return value.item() if hasattr(value, "item") else value
