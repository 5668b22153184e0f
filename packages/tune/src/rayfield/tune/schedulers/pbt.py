"""Population based training: exploit the best trials' checkpoints, explore their configs."""

from __future__ import annotations

import copy
import json
import math
import os
import random
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rayfield.tune import decisions as D
from rayfield.tune.error import TuneError
from rayfield.tune.schedulers.trial_scheduler import Decisions, FIFOScheduler
from rayfield.tune.search.sample import Domain
from rayfield.tune.search.variant_generator import format_vars
from rayfield.util import private_files

if TYPE_CHECKING:
    from rayfield.tune.schedulers.trial_scheduler import SchedulerRunner
    from rayfield.tune.trial import Trial

__all__ = ["PopulationBasedTraining", "explore"]


def explore(
    config: dict[str, Any],
    mutations: dict[str, Any],
    resample_probability: float,
    custom_explore_fn: Callable[[dict[str, Any]], dict[str, Any]] | None,
    rng: random.Random,
) -> dict[str, Any]:
    """A perturbed copy of ``config``.

    For each key of ``mutations``: a list value is resampled with probability
    ``resample_probability`` (or when the current value is not in it), else moved to a
    neighbouring entry; a function or a domain is resampled with that probability, else
    the value is multiplied by 0.8 or 1.2 (ints stay ints); a dict recurses.
    ``custom_explore_fn`` runs last.
    """
    new = copy.deepcopy(config)
    for key, spec in mutations.items():
        if isinstance(spec, dict):
            new[key] = explore(config.get(key, {}), spec, resample_probability, None, rng)
        elif isinstance(spec, (list, tuple)):
            current = config.get(key)
            if rng.random() < resample_probability or current not in spec:
                new[key] = rng.choice(spec)
            else:
                index = list(spec).index(current) + rng.choice((-1, 1))
                new[key] = spec[min(max(index, 0), len(spec) - 1)]
        else:
            sample = spec.sample if isinstance(spec, Domain) else spec
            if rng.random() < resample_probability or key not in config:
                new[key] = sample()
            else:
                factor = rng.choice((0.8, 1.2))
                value = config[key] * factor
                new[key] = int(value) if isinstance(config[key], int) else value
    if custom_explore_fn is not None:
        new = custom_explore_fn(new)
        if new is None:
            raise TuneError("custom_explore_fn must return the new config, it returned None")
    return new


class PopulationBasedTraining(FIFOScheduler):
    """Every ``perturbation_interval``, the bottom quantile copies the top quantile.

    When a trial has run ``perturbation_interval`` (``time_attr``) since its last
    perturbation, the live trials are ranked by their last score. A trial in the top
    ``quantile_fraction`` saves an in-memory checkpoint; a trial in the bottom one is
    *exploited*: it restores the checkpoint of a random top trial and continues with that
    trial's config *explored* by :func:`explore`. Trials that cannot all run at once are
    time-multiplexed (paused between intervals), which needs checkpointing trainables.

    Args:
        time_attr: the result key measuring progress.
        metric, mode: what to optimise.
        perturbation_interval: ``time_attr`` between perturbations of a trial.
        hyperparam_mutations: key -> list of values, function, domain or nested dict.
        quantile_fraction: the top/bottom fraction, in [0, 0.5].
        resample_probability: chance of resampling instead of perturbing.
        custom_explore_fn: ``f(config) -> config`` applied after the mutations.
        log_config: write ``pbt_global.txt`` and ``pbt_policy_<trial>.txt`` (one JSON line
            per exploit: target tag, clone tag, target and clone iteration, old and new
            config) in the experiment directory (mode 0600).
        seed: seeds the random choices.

    Raises:
        TuneError: no mutations and no custom_explore_fn, or a quantile outside [0, 0.5].
        TypeError: a mutation that is not a list, function, domain or dict.

    Sources:
        Jaderberg et al., "Population Based Training of Neural Networks",
        arXiv:1711.09846, 2017 (truncation selection; perturb by 0.8/1.2 or resample).
    """

    def __init__(
        self,
        time_attr: str = "time_total_s",
        reward_attr: str | None = None,
        metric: str | None = None,
        mode: str | None = None,
        perturbation_interval: float = 60.0,
        hyperparam_mutations: dict[str, Any] | None = None,
        quantile_fraction: float = 0.25,
        resample_probability: float = 0.25,
        custom_explore_fn: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
        log_config: bool = True,
        seed: int | None = None,
    ) -> None:
        super().__init__(metric, mode, reward_attr)
        mutations = hyperparam_mutations or {}
        if not mutations and custom_explore_fn is None:
            raise TuneError("PBT needs hyperparam_mutations or custom_explore_fn")
        _check_mutations(mutations)
        if not 0 <= quantile_fraction <= 0.5:
            raise TuneError(f"quantile_fraction must be in [0, 0.5], got {quantile_fraction}")
        if perturbation_interval <= 0:
            raise TuneError(f"perturbation_interval must be > 0, got {perturbation_interval}")
        self.time_attr = time_attr
        self.perturbation_interval = perturbation_interval
        self.hyperparam_mutations = mutations
        self.quantile_fraction = quantile_fraction
        self.resample_probability = resample_probability
        self.custom_explore_fn = custom_explore_fn
        self.log_config = log_config
        self._rng = random.Random(seed)
        self._state: dict[str, dict[str, Any]] = {}
        self.num_checkpoints = 0
        self.num_perturbations = 0

    def on_trial_add(self, runner: SchedulerRunner, trial: Trial) -> None:
        self._state[trial.trial_id] = {
            "trial": trial,
            "last_perturbation_time": 0.0,
            "last_score": None,
            "last_checkpoint": None,
            "orig_tag": trial.experiment_tag,
        }

    def on_trial_result(
        self, runner: SchedulerRunner, trial: Trial, result: dict[str, Any]
    ) -> Decisions:
        from rayfield.tune.trial import Trial, TrialCheckpoint

        t, score = result.get(self.time_attr), self.score(result)
        state = self._state.get(trial.trial_id)
        if t is None or score is None or state is None:
            return self.CONTINUE
        if t - state["last_perturbation_time"] < self.perturbation_interval:
            return self.CONTINUE
        state["last_score"] = score
        state["last_perturbation_time"] = t
        lower, upper = self.quantiles()
        decisions: list[D.SchedulerDecision] = []
        if trial in upper:
            # The state as of the trial's last result the runner recorded.
            checkpoint = TrialCheckpoint("memory", result=dict(trial.last_result))
            state["last_checkpoint"] = checkpoint
            decisions.append(D.SaveToMemory(trial, checkpoint))
            self.num_checkpoints += 1
        else:
            state["last_checkpoint"] = None
        if trial in lower and upper:
            decisions += self._exploit(runner, trial, self._rng.choice(upper), result)
        waiting = runner.trials_with_status(Trial.PENDING) or runner.trials_with_status(
            Trial.PAUSED
        )
        decisions.append(self.PAUSE if waiting else self.CONTINUE)
        return decisions

    def quantiles(self) -> tuple[list[Trial], list[Trial]]:
        """(bottom, top) trials by last score among live trials with a score."""
        scored = [
            s
            for s in self._state.values()
            if s["last_score"] is not None and not s["trial"].is_finished()
        ]
        scored.sort(key=lambda s: s["last_score"])
        if len(scored) <= 1:
            return [], []
        k = min(math.ceil(len(scored) * self.quantile_fraction), len(scored) // 2)
        trials = [s["trial"] for s in scored]
        return trials[:k], (trials[-k:] if k else [])

    def _exploit(
        self, runner: SchedulerRunner, trial: Trial, clone: Trial, result: dict[str, Any]
    ) -> list[D.SchedulerDecision]:
        """PBT's exploit: ``trial`` takes ``clone``'s last checkpoint and an explored
        copy of its config (a Reset), when the clone has a checkpoint."""
        clone_state = self._state[clone.trial_id]
        checkpoint = clone_state["last_checkpoint"]
        if checkpoint is None:
            return []
        new_config = self._explore_config(clone.config)
        changed = {(k,): new_config[k] for k in self.hyperparam_mutations if k in new_config}
        new_tag = f"{self._state[trial.trial_id]['orig_tag']}@perturbed[{format_vars(changed)}]"
        if self.log_config:
            self._log(runner, trial, clone, result, new_config)
        self._state[trial.trial_id]["last_perturbation_time"] = clone_state[
            "last_perturbation_time"
        ]
        self.num_perturbations += 1
        return [D.Reset(trial, new_config, new_tag, checkpoint)]

    def _explore_config(self, config: dict[str, Any]) -> dict[str, Any]:
        """The config an exploited trial continues with (PBT: :func:`explore`)."""
        return explore(
            config,
            self.hyperparam_mutations,
            self.resample_probability,
            self.custom_explore_fn,
            self._rng,
        )

    def _log(
        self,
        runner: SchedulerRunner,
        trial: Trial,
        clone: Trial,
        result: dict[str, Any],
        new_config: dict[str, Any],
    ) -> None:
        folder = runner.experiment_dir
        if not folder:
            return
        private_files.ensure_private_dir(folder)
        line = json.dumps(
            [
                trial.experiment_tag,
                clone.experiment_tag,
                result.get("training_iteration"),
                clone.last_result.get("training_iteration"),
                clone.config,
                new_config,
            ],
            default=str,
        )
        with private_files.open_private(os.path.join(folder, "pbt_global.txt"), "a") as f:
            f.write(line + "\n")
        clone_policy = os.path.join(folder, f"pbt_policy_{clone.trial_id}.txt")
        history = ""
        if os.path.lexists(clone_policy):
            history = private_files.read_text(clone_policy)
        policy = os.path.join(folder, f"pbt_policy_{trial.trial_id}.txt")
        private_files.write_text(policy, history + line + "\n")

    def on_trial_complete(
        self, runner: SchedulerRunner, trial: Trial, result: dict[str, Any]
    ) -> None:
        state = self._state.get(trial.trial_id)
        if state is not None:
            state["last_checkpoint"] = None

    def on_trial_remove(self, runner: SchedulerRunner, trial: Trial) -> None:
        self._state.pop(trial.trial_id, None)

    def choose_trial_to_run(self, runner: SchedulerRunner) -> Trial | None:
        from rayfield.tune.trial import Trial

        candidates = [
            t
            for t in runner.trials_with_status(Trial.PENDING)
            + runner.trials_with_status(Trial.PAUSED)
            if runner.has_resources_for(t)
        ]
        if not candidates:
            return None
        return min(
            candidates,
            key=lambda t: self._state.get(t.trial_id, {}).get("last_perturbation_time", 0.0),
        )

    def debug_string(self) -> str:
        return (
            f"PopulationBasedTraining: {self.num_checkpoints} checkpoints, "
            f"{self.num_perturbations} perturbs"
        )


def _check_mutations(mutations: dict[str, Any]) -> None:
    for key, spec in mutations.items():
        if isinstance(spec, dict):
            _check_mutations(spec)
        elif not (isinstance(spec, (list, tuple, Domain)) or callable(spec)):
            raise TypeError(
                f"hyperparam_mutations[{key!r}] must be a list, a function, a tune domain or "
                f"a dict, got {type(spec).__name__}"
            )
