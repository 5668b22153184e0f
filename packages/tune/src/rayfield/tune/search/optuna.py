"""``OptunaSearch``: Optuna's samplers (TPE by default) as a Tune searcher.

Needs ``pip install rayfield-tune[optuna]``. Tune domains become Optuna distributions
(nested keys are joined with ``/``); each trial is an Optuna ask/tell trial.
"""

from __future__ import annotations

from typing import Any

from rayfield.tune.search.sample import Categorical, Domain, Float, Integer
from rayfield.tune.search.searcher import Searcher

__all__ = ["OptunaSearch"]


def _import_optuna() -> Any:
    try:
        import optuna
    except ImportError:
        raise ImportError(
            "OptunaSearch needs optuna: pip install 'rayfield-tune[optuna]'"
        ) from None
    return optuna


def _distribution(optuna: Any, name: str, domain: Domain) -> Any:
    d = optuna.distributions
    if isinstance(domain, Categorical):
        return d.CategoricalDistribution(domain.categories)
    if isinstance(domain, Float) and domain.sampler != "normal":
        log = domain.sampler == "loguniform"
        return d.FloatDistribution(
            domain.lower, domain.upper, log=log, step=None if log else domain.q
        )
    if isinstance(domain, Integer):
        log = domain.sampler == "loguniform"
        high = domain.upper if domain.q is not None else domain.upper - 1
        return d.IntDistribution(domain.lower, high, log=log, step=1 if log else domain.q or 1)
    raise ValueError(f"OptunaSearch cannot model {name} = {domain!r}")


def _flat_domains(config: dict[str, Any], prefix: str = "") -> dict[str, Domain]:
    out: dict[str, Domain] = {}
    for key, value in config.items():
        if isinstance(value, dict):
            out.update(_flat_domains(value, f"{prefix}{key}/"))
        elif isinstance(value, Domain):
            out[f"{prefix}{key}"] = value
    return out


def _unflatten(flat: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in flat.items():
        node = out
        *parents, last = key.split("/")
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    return out


class OptunaSearch(Searcher):
    """Suggest configs with an Optuna sampler.

    Args:
        space: ``{name: tune domain}`` (nested dicts allowed), or ``{name: optuna
            distribution}``; None takes the domains of the experiment's config.
        metric, mode: what to optimise.
        points_to_evaluate: configs (flat ``{name: value}``) evaluated first.
        sampler: an ``optuna.samplers.BaseSampler`` (default TPE with ``seed``).
        seed: seed of the default sampler.

    Raises:
        ImportError: optuna is not installed.
        ValueError: a domain Optuna cannot model (normal, sample_from).

    Sources:
        Akiba et al., "Optuna: A Next-generation Hyperparameter Optimization Framework",
        KDD 2019; Bergstra et al., "Algorithms for Hyper-Parameter Optimization" (TPE),
        NeurIPS 2011.
    """

    def __init__(
        self,
        space: dict[str, Any] | None = None,
        metric: str | None = None,
        mode: str | None = None,
        points_to_evaluate: list[dict[str, Any]] | None = None,
        sampler: Any = None,
        seed: int | None = None,
    ) -> None:
        super().__init__(metric, mode)
        self._optuna = _import_optuna()
        self._sampler = sampler or self._optuna.samplers.TPESampler(seed=seed)
        self._space: dict[str, Any] = {}
        if space:
            self._set_space(space)
        self._points = list(points_to_evaluate or [])
        self._study: Any = None
        self._live: dict[str, Any] = {}

    def _set_space(self, space: dict[str, Any]) -> None:
        flat = _flat_domains(space)
        dist_type = self._optuna.distributions.BaseDistribution
        for key, value in space.items():
            if isinstance(value, dist_type):
                self._space[key] = value
        for name, domain in flat.items():
            self._space[name] = _distribution(self._optuna, name, domain)

    def set_search_properties(
        self, metric: str | None, mode: str | None, config: dict[str, Any]
    ) -> bool:
        if not self._space and config:
            self._set_space(config)
        return super().set_search_properties(metric, mode, config)

    def _get_study(self) -> Any:
        if self._study is None:
            self._optuna.logging.set_verbosity(self._optuna.logging.WARNING)
            direction = "minimize" if self.mode == "min" else "maximize"
            self._study = self._optuna.create_study(direction=direction, sampler=self._sampler)
            for point in self._points:
                self._study.enqueue_trial(point)
        return self._study

    def suggest(self, trial_id: str) -> dict[str, Any] | None:
        if not self._space:
            raise ValueError("OptunaSearch has no search space: pass space= or domains in config")
        trial = self._get_study().ask(self._space)
        self._live[trial_id] = trial
        return _unflatten(dict(trial.params))

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        trial = self._live.get(trial_id)
        if trial is not None and self.metric in result:
            trial.report(float(result[str(self.metric)]), int(result.get("training_iteration", 0)))

    def on_trial_complete(
        self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False
    ) -> None:
        trial = self._live.pop(trial_id, None)
        if trial is None:
            return
        state = self._optuna.trial.TrialState
        if error or not result or self.metric not in result:
            self._get_study().tell(trial, state=state.FAIL)
        else:
            self._get_study().tell(trial, float(result[str(self.metric)]))
