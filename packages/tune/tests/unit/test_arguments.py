"""Bad arguments raise a ValueError or TypeError naming the argument and what it takes."""

from __future__ import annotations

import datetime
import math

import pytest

from rayfield import tune
from rayfield.tune.arguments import check_time_budget
from rayfield.tune.experiment import Experiment
from rayfield.tune.schedulers import ASHAScheduler


def f(config):
    tune.report(x=1)


def run(**kwargs):
    return tune.run(f, ray_auto_init=False, verbose=0, **kwargs)


def test_an_empty_grid_is_refused_wherever_it_is():
    with pytest.raises(ValueError, match=r"grid_search.*at least one value"):
        tune.grid_search([])
    with pytest.raises(ValueError, match=r"grid_search at opt\.lr has no values"):
        Experiment("e", f, config={"opt": {"lr": {"grid_search": []}}})
    with pytest.raises(ValueError, match=r"grid_search at x has no values"):
        Experiment("e", f, config={"a": tune.grid_search([{"x": {"grid_search": []}}])})


@pytest.mark.parametrize("bad", [-5, -2])
def test_max_failures_below_minus_one_is_refused(bad):
    with pytest.raises(ValueError, match=rf"max_failures must be -1 \(unlimited\) or >= 0.*{bad}"):
        run(max_failures=bad)
    with pytest.raises(TypeError, match="max_failures must be an int"):
        run(max_failures=1.5)


@pytest.mark.parametrize("bad", [-1, 0, math.nan, -math.inf, datetime.timedelta(seconds=-3)])
def test_time_budget_must_be_positive(bad):
    with pytest.raises(ValueError, match="time_budget_s must be > 0 seconds"):
        run(time_budget_s=bad)


def test_time_budget_takes_seconds_or_a_timedelta():
    assert check_time_budget(datetime.timedelta(minutes=2)) == 120.0
    assert check_time_budget(1) == 1.0 and check_time_budget(None) is None
    with pytest.raises(TypeError, match="time_budget_s must be seconds"):
        run(time_budget_s="10s")


def test_scheduler_and_search_alg_must_be_instances():
    with pytest.raises(TypeError, match=r"scheduler must be a TrialScheduler.*'asha'.*instance"):
        run(scheduler="asha")
    with pytest.raises(TypeError, match=r"scheduler must be a TrialScheduler.*ASHAScheduler"):
        run(scheduler=ASHAScheduler)  # the class, not an instance
    with pytest.raises(TypeError, match=r"search_alg must be a Searcher.*got 42"):
        run(search_alg=42)
    with pytest.raises(TypeError, match="search_alg must be a Searcher"):
        run(search_alg="hyperopt")
