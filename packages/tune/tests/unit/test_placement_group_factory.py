"""tune.PlacementGroupFactory: validation, its sums, the Resources made from it, and the
runner starting no more factory trials than the cluster can reserve (no processes)."""

from __future__ import annotations

import pytest
from simulator import Simulator, make_runner

from rayfield import tune
from rayfield.tune.state import trial_from_json, trial_to_json
from rayfield.tune.trial import Resources, Trial


def test_factory_sums_bundles_and_keeps_the_head_bundle():
    pgf = tune.PlacementGroupFactory([{"cpu": 1, "GPU": 1}, {"CPU": 2, "custom": 0.5}], "SPREAD")
    assert pgf.bundles == [{"CPU": 1.0, "GPU": 1.0}, {"CPU": 2.0, "custom": 0.5}]
    assert pgf.head_bundle == {"CPU": 1.0, "GPU": 1.0}
    assert pgf.required_resources == {"CPU": 3.0, "GPU": 1.0, "custom": 0.5}
    assert pgf.strategy == "SPREAD"
    assert pgf == tune.PlacementGroupFactory(
        [{"CPU": 1, "GPU": 1}, {"custom": 0.5, "CPU": 2}], "SPREAD"
    )
    assert pgf != tune.PlacementGroupFactory(pgf.bundles, "PACK")


@pytest.mark.parametrize(
    ("bundles", "strategy", "match"),
    [
        ([], "PACK", "non-empty list"),
        ({"CPU": 1}, "PACK", "non-empty list"),
        ([{"CPU": 1}], "CLOSE", "strategy must be one of"),
        ([{"CPU": -1}], "PACK", "finite and >= 0"),
        ([{"CPU": float("nan")}], "PACK", "finite and >= 0"),
        ([{"CPU": "two"}], "PACK", "must be a number"),
        ([{"CPU": 1}, {}], "PACK", "bundle 1 reserves nothing"),
        ([[1]], "PACK", "bundle 0 must be a dict"),
    ],
)
def test_bad_factories_are_clear_errors(bundles, strategy, match):
    with pytest.raises(tune.TuneError, match=match):
        tune.PlacementGroupFactory(bundles, strategy)


def test_resources_from_a_factory_and_back_through_the_saved_state():
    pgf = tune.PlacementGroupFactory([{"CPU": 1}, {"CPU": 1}, {"CPU": 1, "GPU": 0.5}])
    res = Resources.from_spec(pgf)
    assert (res.cpu, res.gpu, res.extra_cpu, res.extra_gpu) == (1.0, 0.0, 2.0, 0.5)
    assert res.total() == {"CPU": 3.0, "GPU": 0.5}
    assert res.placement_group_factory() == pgf
    assert Resources.from_spec({"cpu": 1}).placement_group_factory() is None
    trial = Trial("t", resources=res)
    assert trial_from_json(trial_to_json(trial)).resources == res


def test_with_resources_refuses_other_kinds():
    with pytest.raises(tune.TuneError, match="PlacementGroupFactory"):
        tune.with_resources(lambda config: None, 3)


def _score(config, it):
    return {"score": it}


def test_runner_starts_only_the_trials_whose_groups_fit():
    # Four RLlib-like trials (1 trainer + 2 workers = 3 CPUs) on 4 CPUs: one at a time.
    pgf = tune.PlacementGroupFactory([{"CPU": 1}, {"CPU": 1}, {"CPU": 1}])
    runner = make_runner(
        {"i": tune.grid_search([0, 1, 2, 3])},
        cpus=4,
        resources_per_trial=pgf,
        stop={"training_iteration": 2},
    )
    sim = Simulator(runner, _score)
    sim.run()
    assert [t.status for t in runner.get_trials()] == [Trial.TERMINATED] * 4
    assert sim.max_running == 1
