"""Population Based Bandits (PB2): PBT whose explore step is a GP bandit."""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

import numpy as np

from rayfield.tune.error import TuneError
from rayfield.tune.schedulers.pbt import PopulationBasedTraining
from rayfield.tune.search.gp import _GP

if TYPE_CHECKING:
    from rayfield.tune.schedulers.trial_scheduler import Decisions, SchedulerRunner
    from rayfield.tune.trial import Trial

__all__ = ["PB2"]


class PB2(PopulationBasedTraining):
    """PBT where an exploited trial's new hyperparameters maximise a GP-UCB score.

    At every perturbation PB2 records, per trial, the time, its (normalised)
    hyperparameters and the rate of improvement of its score since its last perturbation.
    When a bottom trial copies a top one, instead of a random perturbation its new
    hyperparameters maximise ``mu + kappa * sigma`` of a Gaussian process fitted to those
    records, at the current time: the bandit picks where the improvement is expected to be
    highest, or the least explored. Before two records exist, values are drawn uniformly.

    Args:
        time_attr, metric, mode, perturbation_interval, quantile_fraction, log_config, seed:
            as in :class:`PopulationBasedTraining`.
        hyperparam_bounds: ``{key: [low, high]}`` continuous bounds of each tuned value.
        kappa: the exploration weight of the UCB score.
        num_candidates: random candidates scored per explore step.
        max_records: the GP is fitted to the most recent records only.

    Raises:
        TuneError: no bounds, or a bound with ``low >= high``.

    Sources:
        Parker-Holder, Nguyen and Roberts, "Provably Efficient Online Hyperparameter
        Optimization with Population-Based Bandits", NeurIPS 2020, arXiv:2002.02518
        (Algorithm 1; the time-varying kernel is simplified to time as an input dimension).
    """

    def __init__(
        self,
        time_attr: str = "time_total_s",
        metric: str | None = None,
        mode: str | None = None,
        perturbation_interval: float = 60.0,
        hyperparam_bounds: dict[str, Any] | None = None,
        quantile_fraction: float = 0.25,
        log_config: bool = True,
        kappa: float = 2.0,
        num_candidates: int = 500,
        max_records: int = 100,
        seed: int | None = None,
    ) -> None:
        bounds = dict(hyperparam_bounds or {})
        if not bounds:
            raise TuneError("PB2 needs hyperparam_bounds: {key: [low, high]}")
        for key, (low, high) in bounds.items():
            if not low < high:
                raise TuneError(
                    f"hyperparam_bounds[{key!r}]: low must be < high, got {low}, {high}"
                )
        super().__init__(
            time_attr=time_attr,
            metric=metric,
            mode=mode,
            perturbation_interval=perturbation_interval,
            custom_explore_fn=lambda config: config,
            quantile_fraction=quantile_fraction,
            resample_probability=0.0,
            log_config=log_config,
            seed=seed,
        )
        self.hyperparam_bounds = bounds
        self.hyperparam_mutations = {k: lambda: 0.0 for k in bounds}  # keys for the tags
        self.kappa = kappa
        self.num_candidates = num_candidates
        self.max_records = max_records
        self._np_rng = np.random.default_rng(seed)
        self._records: list[tuple[float, list[float], float]] = []
        self._now = 0.0

    def _normalise(self, config: dict[str, Any]) -> list[float]:
        return [
            (float(config[k]) - lo) / (hi - lo) for k, (lo, hi) in self.hyperparam_bounds.items()
        ]

    def on_trial_result(
        self, runner: SchedulerRunner, trial: Trial, result: dict[str, Any]
    ) -> Decisions:
        state = self._state.get(trial.trial_id)
        t, score = result.get(self.time_attr), self.score(result)
        if state is not None and t is not None and score is not None:
            since = float(t) - state["last_perturbation_time"]
            if since >= self.perturbation_interval and state["last_score"] is not None:
                rate = (score - state["last_score"]) / since
                self._records.append((float(t), self._normalise(trial.config), rate))
                del self._records[: -self.max_records]
            self._now = max(self._now, float(t))
        return super().on_trial_result(runner, trial, result)

    def _explore_config(self, config: dict[str, Any]) -> dict[str, Any]:
        dims = len(self.hyperparam_bounds)
        candidates = self._np_rng.random((self.num_candidates, dims))
        if len(self._records) >= 2:
            t_max = max(max(r[0] for r in self._records), self._now) or 1.0
            x = np.array([[r[0] / t_max, *r[1]] for r in self._records])
            y = np.array([r[2] for r in self._records])
            gp = _GP(x, y, noise=1e-3)
            query = np.hstack([np.full((len(candidates), 1), self._now / t_max), candidates])
            mu, sigma = gp.predict(query)
            best = candidates[int(np.argmax(mu + self.kappa * sigma))]
        else:
            best = candidates[0]
        new = copy.deepcopy(config)
        for (key, (lo, hi)), u in zip(self.hyperparam_bounds.items(), best):
            value = lo + float(u) * (hi - lo)
            new[key] = round(value) if isinstance(config.get(key), int) else value
        return new

    def debug_string(self) -> str:
        return f"PB2: {self.num_checkpoints} checkpoints, {self.num_perturbations} perturbs"
