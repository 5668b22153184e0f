"""RLlib trials under Tune reserve a placement group each (trainer + one bundle a
rollout worker): with 3 CPUs a trial on a 4-CPU cluster, four PG trials run one at a
time and none deadlocks; the workers land in their trial's bundles 1 and 2."""

from __future__ import annotations

import pytest

from rayfield.rllib.agents.pg import PGTrainer

tune = pytest.importorskip("rayfield.tune")

# About 75 s on 2 cores (4 trials x 3 processes importing torch): `nox -s learning`. The
# normal suite's check of the same wiring is rayfield-tune's
# tests/integration/test_placement_groups.py (a trainable starting 2 actors in its group).
pytestmark = [
    pytest.mark.slow,
    pytest.mark.usefixtures("cluster"),
    pytest.mark.rayfield_runtime(num_cpus=4),
]


class _PG(PGTrainer):
    """PG that also reports its placement group and its workers'."""

    def step(self):
        import rayfield
        from rayfield.util import get_current_placement_group

        result = super().step()

        def group(_worker):
            g = get_current_placement_group()
            return None if g is None else g.id.hex()

        own = get_current_placement_group()
        result["own_group"] = None if own is None else own.id.hex()
        result["worker_groups"] = rayfield.get(
            [w.apply.remote(group) for w in self.workers.remote_workers()], timeout=60
        )
        return result


def test_four_pg_trials_of_three_cpus_run_one_at_a_time_on_four_cpus(tmp_path):
    analysis = tune.run(
        _PG,
        config={
            "env": "CartPole-v1",
            "num_workers": 2,
            "train_batch_size": 100,
            "rollout_fragment_length": 50,
            "model": {"fcnet_hiddens": [8]},
            "seed": tune.grid_search([0, 1, 2, 3]),
        },
        stop={"training_iteration": 1},
        local_dir=str(tmp_path),
        verbose=0,
    )
    trials = list(analysis)
    assert [t.status for t in trials] == ["TERMINATED"] * 4
    assert trials[0].resources.total() == {"CPU": 3.0}
    for trial in trials:
        r = trial.last_result
        assert r["own_group"] is not None
        assert r["worker_groups"] == [r["own_group"]] * 2
    assert len({t.last_result["own_group"] for t in trials}) == 4
