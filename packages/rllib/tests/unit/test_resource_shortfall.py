"""`resource_shortfall`: the warning a `WorkerSet` gives when its remote workers can never
all run at once on the cluster (they would wait in silence otherwise)."""

from __future__ import annotations

from rayfield.rllib.evaluation.worker_set import resource_shortfall


def test_workers_that_fit_give_none() -> None:
    assert resource_shortfall(2, {}, {"CPU": 2.0}) is None
    assert resource_shortfall(4, {"num_cpus_per_worker": 0.5}, {"CPU": 2.0}) is None
    assert resource_shortfall(0, {"num_gpus_per_worker": 1}, {"CPU": 2.0}) is None


def test_too_many_cpus_names_the_need_the_total_and_the_fix() -> None:
    msg = resource_shortfall(32, {"num_workers": 32}, {"CPU": 2.0}, {"CPU": 2.0})
    assert msg is not None
    assert "32 rollout workers need 32 CPU (the cluster has 2)" in msg
    assert "Lower num_workers" in msg


def test_cpus_held_by_other_actors_name_what_is_free_now() -> None:
    msg = resource_shortfall(2, {}, {"CPU": 4.0}, {"CPU": 1.0})
    assert msg is not None
    assert "2 CPU (1 of the cluster's 4 are free now: other actors or tasks hold" in msg
    assert resource_shortfall(2, {}, {"CPU": 4.0}, {"CPU": 2.0}) is None


def test_gpus_and_custom_resources_count_too() -> None:
    config = {
        "num_cpus_per_worker": 1,
        "num_gpus_per_worker": 0.5,
        "custom_resources_per_worker": {"accel": 2},
    }
    msg = resource_shortfall(2, config, {"CPU": 8.0, "accel": 3.0})
    assert msg is not None
    assert "1 GPU (the cluster has 0)" in msg and "4 accel (the cluster has 3)" in msg
    assert "CPU" not in msg.split(":")[0]
    assert resource_shortfall(2, config, {"CPU": 8.0, "GPU": 1.0, "accel": 4.0}) is None
