"""``HyperOptSearch``: HyperOpt's TPE as a Tune searcher (``pip install rayfield-tune[hyperopt]``).

The space is a HyperOpt space (``hp.uniform(...)``, nested dicts allowed) or Tune domains,
which are turned into HyperOpt expressions labelled by their path (``"opt/lr"``). Each
suggestion is one HyperOpt trial document driven by ask/tell through ``hyperopt.Trials``.
"""

from __future__ import annotations

import copy
import math
from typing import Any

from rayfield.tune.search.sample import Categorical, Domain, Float, Integer
from rayfield.tune.search.searcher import Searcher

__all__ = ["HyperOptSearch"]


def _import_hyperopt() -> Any:
    try:
        import hyperopt
    except ImportError:
        raise ImportError(
            "HyperOptSearch needs hyperopt: pip install 'rayfield-tune[hyperopt]'"
        ) from None
    return hyperopt


def _to_hyperopt(hp: Any, config: Any, prefix: str = "") -> Any:
    """Tune domains in ``config`` turned into HyperOpt expressions (others kept)."""
    if isinstance(config, dict):
        return {k: _to_hyperopt(hp, v, f"{prefix}{k}/") for k, v in config.items()}
    if not isinstance(config, Domain):
        return config
    label = prefix.rstrip("/")
    if isinstance(config, Categorical):
        return hp.choice(label, config.categories)
    if isinstance(config, Float) and config.sampler != "normal":
        if config.sampler == "loguniform":
            lo, hi = math.log(config.lower), math.log(config.upper)
            return (
                hp.qloguniform(label, lo, hi, config.q)
                if config.q
                else hp.loguniform(label, lo, hi)
            )
        if config.q:
            return hp.quniform(label, config.lower, config.upper, config.q)
        return hp.uniform(label, config.lower, config.upper)
    if isinstance(config, Float):
        return hp.normal(label, config.lower, config.upper)
    if isinstance(config, Integer):
        return hp.uniformint(label, config.lower, config.upper - 1)
    raise ValueError(f"HyperOptSearch cannot model {label} = {config!r}")


class HyperOptSearch(Searcher):
    """Suggest configs with HyperOpt's Tree-structured Parzen Estimator.

    Args:
        space: a HyperOpt space or Tune domains (nested dicts allowed); None takes the
            domains of the experiment's config.
        metric, mode: what to optimise (HyperOpt minimises; ``max`` is negated).
        points_to_evaluate: configs evaluated first (HyperOpt's ``generate_trials_to_calculate``
            form: values, with choices as the chosen value).
        n_initial_points: random suggestions before TPE models the results.
        random_state_seed: seed.

    Raises:
        ImportError: hyperopt is not installed.

    Sources:
        Bergstra, Bardenet, Bengio and Kégl, "Algorithms for Hyper-Parameter Optimization",
        NeurIPS 2011 (TPE); Bergstra, Yamins and Cox, "Making a Science of Model Search",
        ICML 2013 (HyperOpt).
    """

    def __init__(
        self,
        space: dict[str, Any] | None = None,
        metric: str | None = None,
        mode: str | None = None,
        points_to_evaluate: list[dict[str, Any]] | None = None,
        n_initial_points: int = 20,
        random_state_seed: int | None = None,
    ) -> None:
        super().__init__(metric, mode)
        self._hpo = _import_hyperopt()
        import numpy as np
        from hyperopt import tpe

        self._algo = (
            tpe.suggest
            if n_initial_points is None
            else (lambda *a, **k: tpe.suggest(*a, n_startup_jobs=n_initial_points, **k))
        )
        self._rng = np.random.default_rng(random_state_seed)
        self._space: Any = None
        self._points = list(points_to_evaluate or [])
        if space:
            self._set_space(space)
        self._live: dict[str, Any] = {}

    def _set_space(self, space: dict[str, Any]) -> None:
        self._space = _to_hyperopt(self._hpo.hp, space)
        self._domain = self._hpo.Domain(lambda config: config, self._space)
        self._trials = self._hpo.Trials()

    def set_search_properties(
        self, metric: str | None, mode: str | None, config: dict[str, Any]
    ) -> bool:
        if self._space is None and config:
            domains = {k: v for k, v in config.items() if isinstance(v, (Domain, dict))}
            if domains:
                self._set_space(domains)
        return super().set_search_properties(metric, mode, config)

    def suggest(self, trial_id: str) -> dict[str, Any] | None:
        if self._space is None:
            raise ValueError("HyperOptSearch has no search space: pass space= or domains in config")
        hpo = self._hpo
        ids = self._trials.new_trial_ids(1)
        self._trials.refresh()
        if self._points:
            from hyperopt.fmin import generate_trials_to_calculate

            docs = generate_trials_to_calculate([self._points.pop(0)])._dynamic_trials
            for doc in docs:  # renumber the given point as this searcher's next trial
                doc["tid"] = doc["misc"]["tid"] = ids[0]
                idxs = doc["misc"]["idxs"]
                doc["misc"]["idxs"] = {k: [ids[0]] if v else [] for k, v in idxs.items()}
        else:
            seed = int(self._rng.integers(2**31 - 1))
            docs = self._algo(ids, self._domain, self._trials, seed)
        for doc in docs:
            doc["state"] = hpo.JOB_STATE_NEW
        self._trials.insert_trial_docs(docs)
        self._trials.refresh()
        # The stored copy of the document (Trials keeps its own), found by its id.
        doc = next(d for d in self._trials._dynamic_trials if d["tid"] == ids[0])
        self._live[trial_id] = doc
        values = {k: v[0] for k, v in doc["misc"]["vals"].items() if v}
        return copy.deepcopy(hpo.space_eval(self._space, values))

    def on_trial_complete(
        self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False
    ) -> None:
        doc = self._live.pop(trial_id, None)
        if doc is None:
            return
        hpo = self._hpo
        score = self.score(result or {})
        if error or score is None:
            doc["state"] = hpo.JOB_STATE_ERROR
        else:
            doc["state"] = hpo.JOB_STATE_DONE
            doc["result"] = {"loss": -score, "status": hpo.STATUS_OK}
        self._trials.refresh()
