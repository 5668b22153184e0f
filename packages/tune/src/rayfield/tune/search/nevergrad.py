"""``NevergradSearch``: Nevergrad's derivative-free optimisers as a Tune searcher.

Needs ``pip install rayfield-tune[nevergrad]``. Give an optimiser class or instance (e.g.
``ng.optimizers.OnePlusOne``) and a space of Tune domains (turned into a Nevergrad
``Dict`` parametrization) or a Nevergrad parametrization; each suggestion is one
``ask``, each completion one ``tell`` (Nevergrad minimises: ``max`` is negated).
"""

from __future__ import annotations

import math
from typing import Any

from rayfield.tune.search.sample import Categorical, Domain, Float, Integer
from rayfield.tune.search.searcher import Searcher

__all__ = ["NevergradSearch"]


def _import_nevergrad() -> Any:
    try:
        import nevergrad
    except ImportError:
        raise ImportError(
            "NevergradSearch needs nevergrad: pip install 'rayfield-tune[nevergrad]'"
        ) from None
    return nevergrad


def _parametrization(ng: Any, config: dict[str, Any]) -> Any:
    """A Nevergrad ``Dict`` for the Tune domains in ``config`` (nested dicts kept)."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, dict):
            sub = _parametrization(ng, value)
            if len(sub):
                out[key] = sub
        elif isinstance(value, Categorical):
            out[key] = ng.p.Choice(value.categories)
        elif isinstance(value, Float) and value.sampler == "loguniform":
            out[key] = ng.p.Log(lower=value.lower, upper=value.upper)
        elif isinstance(value, Float) and value.sampler == "uniform":
            out[key] = ng.p.Scalar(lower=value.lower, upper=value.upper)
        elif isinstance(value, Integer):
            out[key] = ng.p.Scalar(lower=value.lower, upper=value.upper - 1).set_integer_casting()
        elif isinstance(value, Domain):
            raise ValueError(f"NevergradSearch cannot model {key} = {value!r}")
    return ng.p.Dict(**out)


class NevergradSearch(Searcher):
    """Suggest configs with a Nevergrad optimiser (ask/tell).

    Args:
        optimizer: a Nevergrad optimiser family such as ``ng.optimizers.OnePlusOne`` (built
            here with the space), or an optimiser instance.
        space: Tune domains (or a Nevergrad parametrization); None takes the domains of
            the experiment's config. Ignored when ``optimizer`` is an instance.
        metric, mode: what to optimise.
        budget: the optimiser's budget when it is built here.

    Raises:
        ImportError: nevergrad is not installed.

    Sources:
        Rapin and Teytaud, "Nevergrad - A gradient-free optimization platform",
        GitHub, 2018; Droste, Jansen and Wegener, "On the analysis of the (1+1)
        evolutionary algorithm", Theoretical Computer Science 276, 2002 (OnePlusOne).
    """

    def __init__(
        self,
        optimizer: Any = None,
        space: Any = None,
        metric: str | None = None,
        mode: str | None = None,
        budget: int | None = None,
    ) -> None:
        super().__init__(metric, mode)
        self._ng = _import_nevergrad()
        self._optimizer_arg = optimizer or self._ng.optimizers.OnePlusOne
        self._budget = budget
        self._opt: Any = None
        if hasattr(self._optimizer_arg, "ask"):  # an optimiser instance, ready to use
            self._opt = self._optimizer_arg
        elif space is not None:
            self._build(space)
        self._live: dict[str, Any] = {}

    def _build(self, space: Any) -> None:
        ng = self._ng
        param = space if isinstance(space, ng.p.Parameter) else _parametrization(ng, space)
        self._opt = self._optimizer_arg(parametrization=param, budget=self._budget)

    def set_search_properties(
        self, metric: str | None, mode: str | None, config: dict[str, Any]
    ) -> bool:
        if self._opt is None and config:
            self._build(config)
        return super().set_search_properties(metric, mode, config)

    def suggest(self, trial_id: str) -> dict[str, Any] | None:
        if self._opt is None:
            raise ValueError("NevergradSearch has no search space: pass space= or domains")
        candidate = self._opt.ask()
        self._live[trial_id] = candidate
        value = candidate.value
        return dict(value) if isinstance(value, dict) else {"value": value}

    def on_trial_complete(
        self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False
    ) -> None:
        candidate = self._live.pop(trial_id, None)
        score = self.score(result or {})
        if candidate is None or error or score is None or not math.isfinite(score):
            return
        self._opt.tell(candidate, -score)
