"""BayesOptSearch with the real bayesian-optimization package (in process)."""

from __future__ import annotations

import math
import random

import pytest

from rayfield import tune
from rayfield.tune.search.bayesopt import BayesOptSearch

pytest.importorskip("bayes_opt")


def objective(config):
    """Maximum 0 at x=0.3, lr=1e-2; n is an integer with no effect."""
    return -((config["x"] - 0.3) ** 2) - (math.log10(config["opt"]["lr"]) + 2.0) ** 2 / 4


SPACE = {"x": tune.uniform(0, 1), "opt": {"lr": tune.loguniform(1e-4, 1)}, "n": tune.randint(1, 4)}


def run_mixed(searcher, trials):
    scores = []
    for i in range(trials):
        c = searcher.suggest(str(i))
        assert 0 <= c["x"] <= 1 and 1e-4 <= c["opt"]["lr"] <= 1 and c["n"] in (1, 2, 3)
        assert isinstance(c["n"], int)
        score = objective(c)
        searcher.on_trial_complete(str(i), {"score": score})
        scores.append(score)
    return scores


def test_bayesopt_learns_better_than_random_search_with_the_same_trials():
    s = BayesOptSearch(
        {k: SPACE[k] for k in ("x", "opt")},
        metric="score",
        mode="max",
        random_state=0,
        random_search_steps=4,
        utility_kwargs={"kind": "ei", "xi": 0.0},
    )
    scores = []
    for i in range(12):
        c = s.suggest(str(i))
        scores.append(objective(c))
        s.on_trial_complete(str(i), {"score": scores[-1]})
    assert len(s._get_optimizer().space) == 12
    # Random search's best of 12, over 21 seeds: the model's best beats its median.
    randoms = []
    for seed in range(21):
        rng = random.Random(seed)
        randoms.append(
            max(
                objective({"x": rng.random(), "opt": {"lr": 10 ** rng.uniform(-4, 0)}})
                for _ in range(12)
            )
        )
    assert max(scores) > sorted(randoms)[10], (max(scores), sorted(randoms))
    assert max(scores[4:]) > max(scores[:4])  # a modelled point beats the random ones


def test_classic_space_min_mode_points_to_evaluate_and_save_restore(tmp_path):
    s = BayesOptSearch(
        {"width": (0, 20), "height": (-100, 100)},
        metric="loss",
        mode="min",
        points_to_evaluate=[{"width": 10.0, "height": 0.0}],
        utility_kwargs={"kind": "ei", "xi": 0.01},
        random_state=0,
        random_search_steps=3,
    )
    assert s.suggest("first") == {"width": 10.0, "height": 0.0}
    s.on_trial_complete("first", {"loss": 52.5})
    losses = []
    for i in range(10):
        c = s.suggest(str(i))
        assert 0 <= c["width"] <= 20 and -100 <= c["height"] <= 100
        loss = (c["width"] - 15) ** 2 / 10 + abs(c["height"] + 40) / 10
        s.on_trial_complete(str(i), {"loss": loss})
        losses.append(loss)
    assert min(losses) < 3.0  # min mode: the model looks for low losses
    path = str(tmp_path / "bo.pkl")
    s.save(path)
    other = BayesOptSearch(
        {"width": (0, 20), "height": (-100, 100)},
        metric="loss",
        mode="min",
        utility_kwargs={"kind": "ei", "xi": 0.01},
    )
    other.restore(path)
    assert len(other._get_optimizer().space) == 11
    s.on_trial_complete("unknown", {"loss": 1.0})  # not its trial: ignored
    s.suggest("failed")
    s.on_trial_complete("failed", None, error=True)
    assert len(s._get_optimizer().space) == 11


def test_bayesopt_refuses_what_it_cannot_model():
    with pytest.raises(ValueError, match="choice"):
        BayesOptSearch({"act": tune.choice(["a", "b"])})
    with pytest.raises(ValueError, match="utility kind"):
        BayesOptSearch({"w": (0, 1)}, utility_kwargs={"kind": "lcb"})
    with pytest.raises(ValueError, match="no search space"):
        BayesOptSearch(metric="m", mode="max").suggest("a")


def test_integer_and_log_domains_stay_in_range_through_the_model():
    s = BayesOptSearch(SPACE, metric="score", mode="max", random_state=1, random_search_steps=3)
    scores = run_mixed(s, 5)  # the last two come from the package's GP
    assert len(scores) == 5 and len(s._get_optimizer().space) == 5


def test_the_builtin_gp_is_still_importable_from_search_bayesopt():
    from rayfield.tune.search import bayesopt, gp

    assert bayesopt.GPSearch is gp.GPSearch
