"""AxSearch driving tune.run with real trial actors (its own module: Ax imports torch
and pandas, whose threads stay for the life of the process)."""

from __future__ import annotations

import pytest

pytest.importorskip("ax")  # the [ax] extra, part of the test extra

from rayfield import tune
from rayfield.tune.search import ConcurrencyLimiter

pytestmark = [
    pytest.mark.usefixtures("cluster"),
    pytest.mark.rayfield_allow_leaks(
        r"native thread \d+ \((python|jemalloc_bg_thd)\)",
        reason="torch (imported by Ax/BoTorch in the driver) and pyarrow's jemalloc (pandas "
        "imports pyarrow when installed) start threads they never join",
    ),
]


def test_ax_search_drives_tune_run(tmp_path):
    from rayfield.tune.search.ax import AxSearch

    def f(config):
        tune.report(loss=(config["x"] - 0.25) ** 2 + config["offset"])

    analysis = tune.run(
        f,
        name="ax",
        config={"x": tune.uniform(0, 1), "offset": 1.0},
        search_alg=ConcurrencyLimiter(AxSearch(seed=0), max_concurrent=2),
        num_samples=4,  # Ax's Sobol start: no BoTorch fit (seconds each here)
        metric="loss",
        mode="min",
        local_dir=str(tmp_path),
        verbose=0,
    )
    trials = list(analysis)
    assert len(trials) == 4 and all(t.status == "TERMINATED" for t in trials)
    assert all(t.config["offset"] == 1.0 and 0 <= t.config["x"] <= 1 for t in trials)
    assert len({t.config["x"] for t in trials}) == 4  # four distinct Sobol points
    assert 1.0 <= analysis.best_result["loss"] < 1.5625
