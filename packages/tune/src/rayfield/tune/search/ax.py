"""``AxSearch``: Ax (adaptive experimentation: Sobol, then GP Bayesian optimisation with
BoTorch) as a Tune searcher.

Needs ``pip install rayfield-tune[ax]`` (``ax-platform``, which brings BoTorch and
PyTorch). It drives an ``ax.service.ax_client.AxClient``: the classic form passes one
(``AxSearch(ax_client)``, the experiment created by the user), the modern form a space of
Tune domains (nested keys are joined with ``/``) or Ax parameter dicts from which one is
built. Each Tune trial is one Ax trial (``get_next_trial``/``complete_trial``); a trial
that errs or ends without the metric is marked failed.
"""

from __future__ import annotations

import logging
import warnings
from typing import Any

from rayfield.tune.search.optuna import _flat_domains, _unflatten
from rayfield.tune.search.sample import Categorical, Domain, Float, Integer, _quantize
from rayfield.tune.search.searcher import Searcher

__all__ = ["AxSearch"]


def _import_ax() -> Any:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            from ax.service import ax_client
    except ImportError:
        raise ImportError("AxSearch needs ax-platform: pip install 'rayfield-tune[ax]'") from None
    return ax_client


def ax_parameter(name: str, domain: Domain) -> dict[str, Any]:
    """The Ax parameter dict of one Tune domain.

    Raises:
        ValueError: a domain Ax cannot model (normal, ``sample_from``).
    """
    if isinstance(domain, Categorical):
        values = list(domain.categories)
        if len(values) == 1:
            return {"name": name, "type": "fixed", "value": values[0]}
        return {
            "name": name,
            "type": "choice",
            "values": values,
            "is_ordered": False,
            "sort_values": False,
        }
    if isinstance(domain, Float) and domain.sampler != "normal":
        return {
            "name": name,
            "type": "range",
            "bounds": [float(domain.lower), float(domain.upper)],
            "value_type": "float",
            "log_scale": domain.sampler == "loguniform",
        }
    if isinstance(domain, Integer):
        upper = domain.upper if domain.q is not None else domain.upper - 1  # inclusive
        return {
            "name": name,
            "type": "range",
            "bounds": [int(domain.lower), int(upper)],
            "value_type": "int",
            "log_scale": domain.sampler == "loguniform",
        }
    raise ValueError(f"AxSearch cannot model {name} = {domain!r}")


class AxSearch(Searcher):
    """Suggest configs with Ax (Sobol initialisation, then BoTorch GP + expected
    improvement).

    Args:
        ax_client: an ``AxClient`` whose experiment is created (the classic form); its
            objective gives the metric and mode when they are not given. None: one is
            built from ``space``.
        space: ``{name: Tune domain}`` (nested dicts allowed) or a list of Ax parameter
            dicts; None takes the domains of the experiment's config.
        metric, mode: what to optimise (``"min"`` or ``"max"``).
        points_to_evaluate: configs (flat ``{name: value}``) run first.
        parameter_constraints, outcome_constraints: Ax's constraint strings
            (``"x + y <= 2"``, ``"accuracy >= 0.9"``).
        max_concurrent: the classic limit of trials in flight; None: unlimited (use
            ``ConcurrencyLimiter`` for the modern form).
        seed: seed of Ax's Sobol and BoTorch generators.
        parameters, objective_name, minimize: the 0.7 docstring's names of ``space``,
            ``metric`` and ``mode == "min"``.

    Raises:
        ImportError: ax-platform is not installed.
        ValueError: a domain Ax cannot model, or both a client and a space.

    Sources:
        Balandat et al., "BoTorch: A Framework for Efficient Monte-Carlo Bayesian
        Optimization", NeurIPS 2020; Bakshy et al., "AE: A domain-agnostic platform for
        adaptive experimentation", NeurIPS Systems for ML workshop 2018 (Ax).
    """

    def __init__(
        self,
        ax_client: Any = None,
        space: dict[str, Any] | list[dict[str, Any]] | None = None,
        metric: str | None = None,
        mode: str | None = None,
        points_to_evaluate: list[dict[str, Any]] | None = None,
        parameter_constraints: list[str] | None = None,
        outcome_constraints: list[str] | None = None,
        max_concurrent: int | None = None,
        seed: int | None = None,
        parameters: list[dict[str, Any]] | None = None,
        objective_name: str | None = None,
        minimize: bool | None = None,
    ) -> None:
        space = space if space is not None else parameters
        metric = metric or objective_name
        if mode is None and minimize is not None:
            mode = "min" if minimize else "max"
        if ax_client is not None and space is not None:
            raise ValueError("AxSearch takes an ax_client or a space, not both")
        super().__init__(metric, mode)
        self._ax = _import_ax()
        self._client = ax_client
        self._space: list[dict[str, Any]] = []
        self._quantized: dict[str, Float] = {}
        if space is not None:
            self._set_space(space)
        if ax_client is not None:
            self._from_client(ax_client)
        self._points = list(points_to_evaluate or [])
        self._parameter_constraints = parameter_constraints
        self._outcome_constraints = outcome_constraints
        self._max_concurrent = max_concurrent
        self._seed = seed
        self._live: dict[str, int] = {}  # Tune trial id -> Ax trial index
        self._queue: list[tuple[dict[str, Any], int]] = []

    def _set_space(self, space: dict[str, Any] | list[dict[str, Any]]) -> None:
        if isinstance(space, list):
            self._space = [dict(p) for p in space]
            return
        for name, domain in _flat_domains(space).items():
            self._space.append(ax_parameter(name, domain))
            if isinstance(domain, Float) and domain.q is not None:
                self._quantized[name] = domain
        for name, value in space.items():  # Ax parameter dicts given by name
            if isinstance(value, dict) and "type" in value:
                self._space.append({"name": name, **value})

    def _from_client(self, client: Any) -> None:
        config = client.experiment.optimization_config
        if config is not None and self.metric is None:
            objective = config.objective
            names = getattr(objective, "metric_names", None)  # Ax 1.x; older: .metric.name
            self.metric = names[0] if names else objective.metric.name
            self.mode = "min" if config.objective.minimize else "max"

    def set_search_properties(
        self, metric: str | None, mode: str | None, config: dict[str, Any]
    ) -> bool:
        if self._client is None and not self._space and config:
            self._quantized = {}
            self._set_space(config)
        return super().set_search_properties(metric, mode, config)

    def _get_client(self) -> Any:
        if self._client is None:
            if not self._space:
                raise ValueError("AxSearch has no search space: pass space= or domains in config")
            if self.metric is None or self.mode not in ("min", "max"):
                raise ValueError("AxSearch needs metric and mode ('min' or 'max')")
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                client = self._ax.AxClient(random_seed=self._seed, verbose_logging=False)
            client.create_experiment(
                name="rayfield-tune",
                parameters=self._space,
                objectives={self.metric: self._ax.ObjectiveProperties(minimize=self.mode == "min")},
                parameter_constraints=self._parameter_constraints,
                outcome_constraints=self._outcome_constraints,
            )
            self._client = client
        if self._points:  # attached once; handed out first, in order
            for point in self._points:
                params, index = self._client.attach_trial(parameters=dict(point))
                self._queue.append((dict(params), int(index)))
            self._points = []
        return self._client

    def suggest(self, trial_id: str) -> dict[str, Any] | None:
        if self._max_concurrent is not None and len(self._live) >= self._max_concurrent:
            return None
        client = self._get_client()
        if self._queue:
            params, index = self._queue.pop(0)
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # gpytorch's numerical notes
                logging.getLogger("ax").setLevel(logging.WARNING)
                params, index = client.get_next_trial()
        self._live[trial_id] = index
        flat = dict(params)
        for name, domain in self._quantized.items():
            flat[name] = _quantize(flat[name], domain.q, domain.lower, domain.upper)
        return _unflatten(flat)

    def on_trial_complete(
        self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False
    ) -> None:
        index = self._live.pop(trial_id, None)
        if index is None:
            return
        client = self._get_client()
        if error or not result or self.metric not in result:
            client.log_trial_failure(trial_index=index)
        else:
            client.complete_trial(
                trial_index=index, raw_data={str(self.metric): (float(result[self.metric]), 0.0)}
            )
