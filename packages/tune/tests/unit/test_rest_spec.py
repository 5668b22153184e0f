"""What the REST server's POST /trials takes: data, inside the experiment directory."""

from __future__ import annotations

import os

import pytest

from rayfield.tune.rest_spec import MAX_TRIALS, BadSpec, check_request


def test_a_plain_spec_is_taken_with_its_paths_inside_the_experiment(tmp_path):
    exp = tmp_path / "exp"
    (exp / "t1" / "checkpoint_000003").mkdir(parents=True)
    name, spec = check_request(
        {
            "name": "more_2",
            "spec": {
                "run": "f",
                "config": {"lr": {"grid_search": [0.1, 0.2]}, "eval": {"batch": 32}},
                "stop": {"training_iteration": 3},
                "num_samples": 2,
                "resources": {"cpu": 1},
                "local_dir": "sub",
                "restore": "t1/checkpoint_000003",
            },
        },
        str(exp),
    )
    assert name == "more_2" and spec["resources_per_trial"] == {"cpu": 1}
    assert spec["local_dir"] == os.path.realpath(exp / "sub")
    assert spec["restore"] == os.path.realpath(exp / "t1" / "checkpoint_000003")
    assert check_request({"name": "x", "spec": {"run": "f"}}, str(exp))[1]["local_dir"] == str(
        os.path.realpath(exp)
    )


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ({"config": {"a": {"b": {"eval": "1 + 1"}}}}, "'eval' expression"),
        ({"trial_name_creator": "x"}, "not accepted"),
        ({"num_samples": 0}, "from 1 to"),
        ({"num_samples": True}, "from 1 to"),
        ({"num_samples": 2, "config": {"x": {"grid_search": list(range(MAX_TRIALS))}}}, "more"),
        ({"stop": {"loss": "low"}}, "metric: number"),
        ({"resources_per_trial": {"cpu": -1}}, ">= 0"),
        ({"local_dir": "/"}, "outside the experiment"),
        ({"restore": "missing"}, "not a checkpoint directory"),
        ({"config": {"x": {"grid_search": []}}}, "non-empty list"),
    ],
)
def test_anything_else_is_refused_with_the_reason(tmp_path, spec, says):
    with pytest.raises(BadSpec, match=says):
        check_request({"name": "n", "spec": {"run": "f", **spec}}, str(tmp_path))


@pytest.mark.parametrize("name", ["..", ".hidden", "a/b", "a..b", "", "x" * 101, 3])
def test_names_are_plain_folder_names(tmp_path, name):
    with pytest.raises(BadSpec, match="name"):
        check_request({"name": name, "spec": {"run": "f"}}, str(tmp_path))


def test_a_symlink_out_of_the_experiment_is_refused(tmp_path):
    exp = tmp_path / "exp"
    exp.mkdir()
    (exp / "out").symlink_to(tmp_path)
    with pytest.raises(BadSpec, match="outside"):
        check_request({"name": "n", "spec": {"run": "f", "local_dir": "out"}}, str(exp))
