"""AxSearch with the real Ax library (in-process). Ax starts with Sobol points (fast);
its BoTorch steps take seconds to a minute each on 2 loaded cores, so the learning test
is slow."""

from __future__ import annotations

import warnings

import pytest

pytest.importorskip("ax")  # the [ax] extra, part of the test extra

from simulator import MIXED_SPACE, minimise_quadratic

from rayfield import tune
from rayfield.tune.search.ax import AxSearch, ax_parameter


def ax_client(seed: int = 0):
    from ax.service.ax_client import AxClient, ObjectiveProperties

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        client = AxClient(random_seed=seed, verbose_logging=False)
    client.create_experiment(
        parameters=[
            {"name": "width", "type": "range", "bounds": [0.0, 20.0]},
            {"name": "height", "type": "range", "bounds": [-100.0, 100.0]},
        ],
        objectives={"score": ObjectiveProperties(minimize=False)},
    )
    return client


def test_tune_domains_become_ax_parameters():
    assert ax_parameter("x", tune.uniform(-1, 2)) == {
        "name": "x", "type": "range", "bounds": [-1.0, 2.0], "value_type": "float",
        "log_scale": False,
    }  # fmt: skip
    assert ax_parameter("lr", tune.loguniform(1e-4, 1))["log_scale"] is True
    assert ax_parameter("k", tune.randint(1, 4))["bounds"] == [1, 3]  # upper excluded
    assert ax_parameter("k", tune.qrandint(0, 10, 5))["bounds"] == [0, 10]  # upper included
    assert ax_parameter("a", tune.choice(["a", "b"]))["values"] == ["a", "b"]
    assert ax_parameter("a", tune.choice(["only"])) == {
        "name": "a",
        "type": "fixed",
        "value": "only",
    }
    with pytest.raises(ValueError, match="cannot model z"):
        ax_parameter("z", tune.randn(0, 1))


def test_sobol_suggestions_lie_in_the_space_and_failures_are_told():
    s = AxSearch(space=MIXED_SPACE, metric="loss", mode="min", seed=0)
    minimise_quadratic(s, 4)  # Ax's Sobol start: every suggestion checked against the space
    s.suggest("failed")
    s.on_trial_complete("failed", None, error=True)
    s.on_trial_complete("unknown", {"loss": 0.0})
    trials = s._client.experiment.trials
    assert sum(t.status.is_completed for t in trials.values()) == 4
    assert sum(t.status.is_failed for t in trials.values()) == 1


def test_classic_client_points_first_and_max_concurrent():
    client = ax_client()
    s = AxSearch(client, max_concurrent=2, points_to_evaluate=[{"width": 10.0, "height": 0.0}])
    assert (s.metric, s.mode) == ("score", "max")  # from the client's objective
    assert s.suggest("a") == {"width": 10.0, "height": 0.0}
    b = s.suggest("b")
    assert 0 <= b["width"] <= 20 and -100 <= b["height"] <= 100
    assert s.suggest("c") is None  # two in flight
    s.on_trial_complete("a", {"score": 3.0})
    assert s.suggest("c") is not None
    data = client.experiment.fetch_data().df
    assert list(data["mean"]) == [3.0]
    with pytest.raises(ValueError, match="not both"):
        AxSearch(client, space={"x": tune.uniform(0, 1)})


def test_legacy_names_and_space_from_the_config():
    s = AxSearch(
        parameters=[{"name": "x", "type": "range", "bounds": [0.0, 1.0]}],
        objective_name="acc",
        minimize=False,
    )
    assert (s.metric, s.mode) == ("acc", "max")
    assert 0 <= s.suggest("t")["x"] <= 1
    from_config = AxSearch(metric="m", mode="min")
    from_config.set_search_properties(None, None, {"q": tune.quniform(0, 1, 0.25), "c": 3})
    assert from_config.suggest("t")["q"] in (0.0, 0.25, 0.5, 0.75, 1.0)


@pytest.mark.slow  # BoTorch steps: tens of seconds each on 2 loaded cores
def test_ax_learns():
    s = AxSearch(space={"x": tune.uniform(-5, 5)}, metric="loss", mode="min", seed=0)
    losses = []
    for i in range(10):  # 5 Sobol points, then 5 BoTorch steps
        x = s.suggest(f"t{i}")["x"]
        losses.append((x - 1.0) ** 2)
        s.on_trial_complete(f"t{i}", {"loss": losses[-1]})
    assert min(losses[5:]) < min(losses[:5]) and min(losses) < 0.05
