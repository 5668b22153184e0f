"""Each scheduler tested on its decisions alone: a stand-in that answers the runner's
queries (no runner, no executor); what the scheduler returns is what is checked."""

from __future__ import annotations

from typing import Any

import pytest

from rayfield.tune import decisions as D
from rayfield.tune.schedulers import (
    AsyncHyperBandScheduler,
    FIFOScheduler,
    HyperBandScheduler,
    MedianStoppingRule,
    PopulationBasedTraining,
)
from rayfield.tune.trial import Trial


class Queries:
    """The runner's queries (SchedulerRunner), over a fixed list of trials."""

    experiment_dir = ""

    def __init__(self, trials: list[Trial], finished: bool = True) -> None:
        self.trials, self.finished = trials, finished

    def trials_with_status(self, status: str) -> list[Trial]:
        return [t for t in self.trials if t.status == status]

    def has_resources_for(self, trial: Trial) -> bool:
        return True

    def search_finished(self) -> bool:
        return self.finished


def make(n: int, status: str = Trial.RUNNING) -> list[Trial]:
    trials = [Trial("t", {"i": i}, trial_id=f"t{i}") for i in range(n)]
    for t in trials:
        t.status = status
    return trials


def test_classic_strings_and_lists_become_decisions() -> None:
    assert D.as_list("STOP") == [D.STOP] and D.as_list(None) == []
    t = make(1)[0]
    assert D.as_list([D.PAUSE, [D.Unpause(t)]]) == [D.PAUSE, D.Unpause(t)]
    with pytest.raises(TypeError, match=r"rayfield\.tune\.decisions"):
        D.as_list("HALT")
    with pytest.raises(TypeError, match="a list of them"):
        D.as_list(3)


def test_fifo_and_asha_answer_for_the_reporting_trial_only() -> None:
    a, b = make(2)
    assert FIFOScheduler().on_trial_result(None, a, {"m": 1}) == D.CONTINUE
    asha = AsyncHyperBandScheduler(
        metric="m", mode="max", max_t=9, grace_period=1, reduction_factor=3
    )
    for t in (a, b):
        asha.on_trial_add(None, t)
    assert asha.on_trial_result(None, a, {"training_iteration": 1, "m": 1.0}) == D.CONTINUE
    assert asha.on_trial_result(None, b, {"training_iteration": 1, "m": 0.0}) == D.STOP
    assert asha.on_trial_result(None, a, {"training_iteration": 9, "m": 1.0}) == D.STOP


def test_median_stopping_pauses_when_soft() -> None:
    s = MedianStoppingRule(
        time_attr="training_iteration",
        metric="m",
        mode="max",
        grace_period=1,
        min_samples_required=1,
        hard_stop=False,
    )
    good, bad = make(2)
    s.on_trial_result(None, good, {"training_iteration": 1, "m": 10})
    s.on_trial_complete(None, good, {"training_iteration": 1, "m": 10})
    assert s.on_trial_result(None, bad, {"training_iteration": 2, "m": 0}) == D.PAUSE


def test_hyperband_halving_stops_and_unpauses_other_trials_by_decision() -> None:
    """A bracket that halves (r < max_t): its trials report at milestone r and pause
    until the last one's result completes the rung; the answer to that result gives every
    member its fate: the top 1/eta go on (Unpause, or Continue for the reporter), the
    others end (StopTrial, or Stop for the reporter). Nothing is acted on yet."""
    hb = HyperBandScheduler(metric="m", mode="max", max_t=9)
    trials = make(9, Trial.PENDING)
    queries = Queries(trials)
    for t in trials:
        hb.on_trial_add(queries, t)
    bracket = next(b for b in hb.bands[0] if b.cumul_r < hb.max_t)
    members = [t for t, _ in bracket.live.values()]
    for t in members:
        t.status = Trial.RUNNING
    score = {t.trial_id: float(i) for i, t in enumerate(members)}  # the last is best
    answers = []
    for t in members:
        result = {"training_iteration": bracket.cumul_r, "m": score[t.trial_id]}
        answers.append(D.as_list(hb.on_trial_result(queries, t, result)))
        if answers[-1] == [D.PAUSE]:
            t.status = Trial.PAUSED
    assert all(a == [D.PAUSE] for a in answers[:-1])
    last, reporter = answers[-1], members[-1]
    fate = {d.trial: "end" for d in last if isinstance(d, D.StopTrial)}
    fate |= {d.trial: "go" for d in last if isinstance(d, D.Unpause)}
    fate[reporter] = "end" if D.STOP in last else "go"
    assert set(fate) == set(members)
    going = {t for t, f in fate.items() if f == "go"}
    ranked = sorted(members, key=lambda t: -score[t.trial_id])
    assert 0 < len(going) < len(members) and going == set(ranked[: len(going)])
    assert all(t.status == Trial.PAUSED for t in members[:-1])  # nothing acted on yet


def test_pbt_saves_the_top_and_resets_the_bottom_by_decision() -> None:
    pbt = PopulationBasedTraining(
        time_attr="training_iteration",
        metric="m",
        mode="max",
        perturbation_interval=1,
        hyperparam_mutations={"lr": [0.1, 0.2, 0.3]},
        quantile_fraction=0.5,
        resample_probability=0.0,
        seed=0,
    )
    top, bottom = make(2)
    top.config, bottom.config = {"lr": 0.1}, {"lr": 0.3}
    queries = Queries([top, bottom], finished=False)
    for t in (top, bottom):
        pbt.on_trial_add(queries, t)
    first = D.as_list(pbt.on_trial_result(queries, top, {"training_iteration": 1, "m": 1.0}))
    assert first == [D.CONTINUE]  # alone in the ranking: nothing to save yet
    second = D.as_list(pbt.on_trial_result(queries, bottom, {"training_iteration": 1, "m": 0.0}))
    assert second == [D.CONTINUE]  # the bottom one, and the top has no checkpoint yet
    third = D.as_list(pbt.on_trial_result(queries, top, {"training_iteration": 2, "m": 2.0}))
    [save] = [d for d in third if isinstance(d, D.SaveToMemory)]
    assert save.trial is top and save.checkpoint.storage == "memory"
    fourth = D.as_list(pbt.on_trial_result(queries, bottom, {"training_iteration": 2, "m": 0.0}))
    [reset] = [d for d in fourth if isinstance(d, D.Reset)]
    assert reset.trial is bottom and reset.checkpoint is save.checkpoint
    # Explored from the clone's config (0.1: its neighbours are 0.1 and 0.2).
    assert reset.config["lr"] in (0.1, 0.2) and "@perturbed" in reset.tag
    assert bottom.config == {"lr": 0.3}  # the runner applies it, not the scheduler


def test_a_decision_naming_no_trial_outside_on_trial_result_is_refused() -> None:
    from simulator import make_runner

    from rayfield import tune
    from rayfield.tune.error import TuneError

    class Bad(FIFOScheduler):
        def on_step(self, runner: Any) -> Any:
            return D.STOP

    runner = make_runner({"x": tune.uniform(0, 1)}, num_samples=1, scheduler=Bad())
    with pytest.raises(TuneError, match="outside on_trial_result"):
        runner.step()
