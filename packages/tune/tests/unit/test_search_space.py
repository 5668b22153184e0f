"""Search-space primitives and variant generation."""

from __future__ import annotations

import math
import random

import pytest

from rayfield import tune
from rayfield.tune.search.variant_generator import count_variants, format_vars, generate_variants


def variants(spec, seed=0):
    return list(generate_variants(spec, random.Random(seed)))


def test_domains_sample_within_their_bounds():
    rng = random.Random(1)
    for _ in range(300):
        assert 2 <= tune.uniform(2, 3).sample(rng=rng) <= 3
        v = tune.quniform(0, 1, 0.25).sample(rng=rng)
        assert v in (0, 0.25, 0.5, 0.75, 1.0)
        assert 1e-4 <= tune.loguniform(1e-4, 1e-1).sample(rng=rng) <= 1e-1
        q = tune.qloguniform(1e-4, 1e-1, 5e-5).sample(rng=rng)
        assert 1e-4 - 1e-12 <= q <= 1e-1 + 1e-12
        assert math.isclose(q / 5e-5, round(q / 5e-5), abs_tol=1e-6)
        assert 3 <= tune.randint(3, 7).sample(rng=rng) < 7
        assert tune.qrandint(0, 10, 5).sample(rng=rng) in (0, 5, 10)
        assert 1 <= tune.lograndint(1, 1000).sample(rng=rng) < 1000
        assert tune.choice(["a", "b"]).sample(rng=rng) in ("a", "b")
        assert tune.qrandn(0, 1, 0.5).sample(rng=rng) % 0.5 == 0


def test_loguniform_is_uniform_in_log_space():
    rng = random.Random(2)
    logs = [math.log10(tune.loguniform(1e-4, 1).sample(rng=rng)) for _ in range(4000)]
    below = sum(1 for x in logs if x < -2) / len(logs)
    assert 0.45 < below < 0.55  # half the mass below the log-midpoint


def test_randn_has_the_given_moments():
    rng = random.Random(3)
    xs = [tune.randn(5, 2).sample(rng=rng) for _ in range(5000)]
    mean = sum(xs) / len(xs)
    sd = (sum((x - mean) ** 2 for x in xs) / len(xs)) ** 0.5
    assert abs(mean - 5) < 0.15 and abs(sd - 2) < 0.15


def test_bad_domains_raise_clear_errors():
    with pytest.raises(ValueError, match="lower must be < upper"):
        tune.uniform(3, 1)
    with pytest.raises(ValueError, match="lower > 0"):
        tune.loguniform(0, 1)
    with pytest.raises(ValueError, match="q must be > 0"):
        tune.quniform(0, 1, 0)
    with pytest.raises(ValueError, match="at least one"):
        tune.choice([])
    with pytest.raises(tune.TuneError, match="list of values"):
        tune.grid_search(3)
    with pytest.raises(TypeError, match="callable"):
        tune.sample_from(3)


def test_grid_times_num_samples_and_first_axis_varies_fastest():
    spec = {"config": {"a": tune.grid_search([1, 2, 3]), "b": tune.grid_search(["x", "y"])}}
    assert count_variants(spec) == 6
    got = [v["config"] for _, v in variants(spec)]
    assert got == [
        {"a": 1, "b": "x"},
        {"a": 2, "b": "x"},
        {"a": 3, "b": "x"},
        {"a": 1, "b": "y"},
        {"a": 2, "b": "y"},
        {"a": 3, "b": "y"},
    ]
    gen = tune.search.BasicVariantGenerator(seed=0)
    gen.add_configurations(
        tune.Experiment(
            "e", lambda c: None, config=spec["config"], num_samples=10, local_dir="/tmp/x"
        )
    )
    assert len(gen.next_trials()) == 60 and gen.is_finished()


def test_without_a_seed_the_global_random_state_makes_a_search_repeatable():
    def configs(seed: int | None) -> list[dict]:
        gen = tune.search.BasicVariantGenerator(seed=seed, shuffle=True)
        space = {"x": tune.uniform(0, 1), "g": tune.grid_search([1, 2, 3])}
        gen.add_configurations(
            tune.Experiment("e", lambda c: None, config=space, num_samples=4, local_dir="/x")
        )
        return [t.config for t in gen.next_trials()]

    random.seed(7)
    first = configs(None)
    random.seed(7)
    assert configs(None) == first  # as random.seed() before a run, in a script
    assert configs(None) != first  # the global state moved on
    assert configs(3) == configs(3) != configs(4)  # a seed: its own generator


def test_docs_example_nested_lists_give_nine_then_ninety_trials():
    config = {
        "alpha": tune.sample_from(lambda spec: random.random()),
        "beta": tune.sample_from(lambda spec: spec.config.alpha * 2),
        "nn_layers": [tune.grid_search([16, 64, 256]), tune.grid_search([16, 64, 256])],
    }
    out = variants({"config": config})
    assert len(out) == 9
    for _, v in out:
        c = v["config"]
        assert c["beta"] == pytest.approx(c["alpha"] * 2)
        assert isinstance(c["nn_layers"], list) and len(c["nn_layers"]) == 2
    assert len({tuple(v["config"]["nn_layers"]) for _, v in out}) == 9
    gen = tune.search.BasicVariantGenerator()
    gen.add_configurations(
        tune.Experiment("e", lambda c: None, config=config, num_samples=10, local_dir="/tmp/x")
    )
    trials = gen.next_trials()
    assert len(trials) == 90
    assert len({t.config["alpha"] for t in trials}) == 90  # alpha resampled per variant


def test_conditional_values_resolve_in_any_order_and_cycles_fail():
    spec = {
        "config": {
            "c": tune.sample_from(lambda s: s.config.b + 1),
            "b": tune.sample_from(lambda s: s.config.a * 10),
            "a": tune.choice([1, 2]),
        }
    }
    [(_, v)] = variants(spec)
    assert v["config"]["b"] == v["config"]["a"] * 10 and v["config"]["c"] == v["config"]["b"] + 1
    cyclic = {
        "config": {
            "x": tune.sample_from(lambda s: s.config.y),
            "y": tune.sample_from(lambda s: s.config.x),
        }
    }
    with pytest.raises(ValueError, match="cycle"):
        variants(cyclic)
    broken = {"config": {"x": tune.sample_from(lambda s: 1 / 0)}}
    with pytest.raises(ValueError, match=r"tune\.function"):
        variants(broken)


def test_sample_from_without_argument_and_eval_form_and_literal_functions():
    def fn(x):
        return x

    spec = {
        "config": {
            "n": tune.sample_from(lambda: 7),
            "m": {"eval": "spec.config.n * 2"},
            "g": {"grid_search": [1, 2]},
            "f": tune.function(fn),
        }
    }
    out = variants(spec)
    assert [v["config"]["g"] for _, v in out] == [1, 2]
    for _, v in out:
        assert v["config"]["n"] == 7 and v["config"]["m"] == 14
        assert v["config"]["f"](3) == 3


def test_spec_is_not_modified_and_grids_nest_in_sampled_values():
    spec = {"config": {"opt": tune.sample_from(lambda s: {"lr": tune.grid_search([0.1, 0.2])})}}
    out = variants(spec)
    assert [v["config"]["opt"]["lr"] for _, v in out] == [0.1, 0.2]
    assert isinstance(spec["config"]["opt"], tune.sample_from)


def test_variants_share_no_mutable_value_with_the_spec_or_each_other():
    # Domains that draw immutable values are not copied into each variant; a choice
    # among lists still gives every variant its own list.
    layers = [64, 64]
    spec = {
        "config": {
            "lr": tune.loguniform(1e-4, 1e-1),
            "act": tune.choice(["relu", "tanh"]),
            "layers": tune.choice([layers]),
            "opt": {"name": tune.grid_search(["sgd", "adam"]), "args": [1, 2]},
        }
    }
    before = repr(spec)
    out = [v for _, v in variants(spec)] + [v for _, v in variants(spec, seed=1)]
    assert repr(spec) == before
    assert len(out) == 4
    assert [v["config"]["opt"]["name"] for v in out] == ["sgd", "adam", "sgd", "adam"]
    lists = [v["config"]["layers"] for v in out] + [v["config"]["opt"]["args"] for v in out]
    assert all(x is not layers for x in lists)
    assert len({id(x) for x in lists}) == len(lists)
    for v in out:
        assert isinstance(v["config"]["lr"], float) and v["config"]["act"] in ("relu", "tanh")


def test_format_vars_and_trial_tags():
    assert format_vars({("config", "lr"): 0.2, ("config", "momentum"): 1}) == "lr=0.2,momentum=1"
    assert format_vars({("config", "layers", 0): 16}) == "layers_0=16"
    assert format_vars({("config", "x"): 1 / 3}) == "x=0.33333"
    assert format_vars({("resources_per_trial", "cpu"): 2}) == ""
    gen = tune.search.BasicVariantGenerator()
    gen.add_configurations(
        tune.Experiment(
            "e",
            lambda c: None,
            config={"lr": tune.grid_search([0.1, 0.2]), "momentum": 1},
            local_dir="/tmp/x",
        )
    )
    tags = [t.experiment_tag for t in gen.next_trials()]
    assert tags == ["0_lr=0.1", "1_lr=0.2"]


def test_resources_per_trial_may_depend_on_the_config():
    exp = tune.Experiment(
        "e",
        lambda c: None,
        config={"workers": tune.grid_search([1, 3])},
        resources_per_trial={"cpu": tune.sample_from(lambda s: s.config.workers + 1)},
        local_dir="/tmp/x",
    )
    gen = tune.search.BasicVariantGenerator()
    gen.add_configurations(exp)
    assert [t.resources.cpu for t in gen.next_trials()] == [2.0, 4.0]
