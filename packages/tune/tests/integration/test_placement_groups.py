"""Trials with a PlacementGroupFactory on a 4-CPU local cluster: each trial reserves its
bundles as one placement group, its trainable's actors land in the group, and the runner
starts no more trials than the cluster can reserve."""

from __future__ import annotations

import itertools
import time

import pytest

import rayfield
from rayfield import tune
from rayfield.util import get_current_placement_group, placement_group_table

pytestmark = [pytest.mark.usefixtures("cluster"), pytest.mark.rayfield_runtime(num_cpus=4)]


@rayfield.remote(num_cpus=1)
class _Worker:
    def group_id(self) -> str | None:
        group = get_current_placement_group()
        return None if group is None else group.id.hex()


class _TwoWorkers(tune.Trainable):
    """A trainer-like trainable: it starts 2 one-CPU actors inside its own group."""

    def setup(self, config):
        self.group = get_current_placement_group()
        self.workers = [_Worker.remote() for _ in range(2)]
        self.started = time.time()

    def step(self):
        ids = rayfield.get([w.group_id.remote() for w in self.workers], timeout=60)
        return {
            "own_group": None if self.group is None else self.group.id.hex(),
            "worker_groups": ids,
            "started": self.started,
            "ended": time.time(),
            "done": True,
        }


def test_each_trial_reserves_its_bundles_and_one_runs_at_a_time(tmp_path):
    pgf = tune.PlacementGroupFactory([{"CPU": 1}, {"CPU": 1}, {"CPU": 1}])
    analysis = tune.run(
        tune.with_resources(_TwoWorkers, pgf),
        config={"i": tune.grid_search([0, 1, 2, 3])},
        local_dir=str(tmp_path),
        verbose=0,
    )
    trials = list(analysis)
    assert [t.status for t in trials] == ["TERMINATED"] * 4
    results = [t.last_result for t in trials]
    groups = [r["own_group"] for r in results]
    assert None not in groups and len(set(groups)) == 4  # one group per trial
    for r in results:  # the trainable's own actors were captured by its group
        assert r["worker_groups"] == [r["own_group"]] * 2
    # 3 CPUs a trial on 4 CPUs: the trials' lifetimes never overlap.
    spans = sorted((r["started"], r["ended"]) for r in results)
    for (_, end), (start, _) in itertools.pairwise(spans):
        assert start >= end
    # Every group was removed when its trial ended.
    table = placement_group_table()
    assert {table[g]["state"] for g in groups} == {"REMOVED"}


class _Bundles(tune.Trainable):
    def step(self):
        group = get_current_placement_group()
        return {"bundles": group.bundle_specs if group else None, "done": True}


def test_resources_per_trial_takes_a_factory(tmp_path):
    analysis = tune.run(
        _Bundles,
        resources_per_trial=tune.PlacementGroupFactory([{"CPU": 1}, {"CPU": 2}], "SPREAD"),
        local_dir=str(tmp_path),
        verbose=0,
    )
    (trial,) = list(analysis)
    assert trial.last_result["bundles"] == [{"CPU": 1.0}, {"CPU": 2.0}]
    assert trial.resources.total() == {"CPU": 3.0}


def test_a_function_trainable_runs_in_its_group(tmp_path):
    def fn(config, reporter):
        group = get_current_placement_group()
        worker = _Worker.remote()  # captured: it takes bundle 1's CPU
        inner = rayfield.get(worker.group_id.remote(), timeout=60)
        reporter(group=None if group is None else group.id.hex(), inner=inner, done=True)

    analysis = tune.run(
        fn,
        resources_per_trial=tune.PlacementGroupFactory([{"CPU": 1}, {"CPU": 1}]),
        local_dir=str(tmp_path),
        verbose=0,
    )
    (trial,) = list(analysis)
    assert trial.last_result["group"] is not None
    assert trial.last_result["inner"] == trial.last_result["group"]


class _GroupCounter(tune.Trainable):
    """Counts through pauses (checkpoints) and reports the group of each run."""

    def setup(self, config):
        self.total = 0

    def step(self):
        self.total += self.config["inc"]
        group = get_current_placement_group()
        return {"total": self.total, "group": None if group is None else group.id.hex()}

    def save_checkpoint(self, checkpoint_dir):
        return {"total": self.total}

    def load_checkpoint(self, checkpoint):
        self.total = checkpoint["total"]


def test_a_paused_trial_frees_its_group_and_takes_a_new_one(tmp_path):
    from rayfield.tune.schedulers import HyperBandScheduler

    groups: dict[str, set[str]] = {}

    class Seen(tune.Callback):
        def on_trial_result(self, trial, result):
            groups.setdefault(trial.trial_id, set()).add(result["group"])

    analysis = tune.run(
        _GroupCounter,
        config={"inc": tune.grid_search([1, 2, 3, 4, 5, 6, 7, 8])},
        resources_per_trial=tune.PlacementGroupFactory([{"CPU": 0.5}, {"CPU": 0.5}]),
        scheduler=HyperBandScheduler(metric="total", mode="max", max_t=9),
        stop={"training_iteration": 9},
        callbacks=[Seen()],
        local_dir=str(tmp_path),
        verbose=0,
    )
    trials = list(analysis)
    for trial in trials:  # restored after each pause: the count went through checkpoints
        r = trial.last_result
        assert r["total"] == trial.config["inc"] * r["training_iteration"]
    # A trial resumed after a pause runs in a new group; every group is gone at the end.
    assert any(len(seen) > 1 for seen in groups.values())
    table = placement_group_table()
    assert {table[g]["state"] for seen in groups.values() for g in seen} == {"REMOVED"}


class _Resettable(tune.Trainable):
    """Counts its actor's starts (a line in ``config["starts"]``); takes any config."""

    def setup(self, config):
        with open(config["starts"], "a") as f:
            f.write("started\n")

    def reset_config(self, new_config):
        return True

    def step(self):
        group = get_current_placement_group()
        return {"group": None if group is None else group.id.hex(), "done": True}


@pytest.mark.parametrize("reuse", [True, False])
def test_reuse_actors_hands_a_trials_actor_and_group_to_an_equal_factory(tmp_path, reuse):
    starts = tmp_path / "starts"
    starts.touch()
    before = set(placement_group_table())
    analysis = tune.run(
        _Resettable,
        config={"i": tune.grid_search(list(range(6))), "starts": str(starts)},
        resources_per_trial=tune.PlacementGroupFactory([{"CPU": 1}, {"CPU": 1}]),
        reuse_actors=reuse,
        max_concurrent_trials=2,
        local_dir=str(tmp_path),
        verbose=0,
    )
    trials = list(analysis)
    assert [t.status for t in trials] == ["TERMINATED"] * 6
    groups = {t.last_result["group"] for t in trials}
    created = set(placement_group_table()) - before
    actors = len(starts.read_text().splitlines())
    assert None not in groups and groups == created
    if reuse:  # two trials at a time: their actors and groups serve all six
        assert actors == len(created) <= 2
    else:
        assert actors == len(created) == 6
    table = placement_group_table()
    assert {table[g]["state"] for g in created} == {"REMOVED"}  # freed at the end
