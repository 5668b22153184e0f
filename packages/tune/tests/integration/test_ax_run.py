"""AxSearch driving tune.run with real trial actors (its own module: Ax imports torch
and pandas, whose threads stay for the life of the process)."""

from __future__ import annotations

import pytest

pytest.importorskip("ax")  # the [ax] extra, part of the test extra

from searcher_run import run_searcher

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

    # 4 samples: Ax's Sobol start, no BoTorch fit (seconds each here).
    analysis = run_searcher(AxSearch(seed=0), tmp_path, "ax", num_samples=4)
    assert len({t.config["x"] for t in analysis}) == 4  # four distinct Sobol points
    assert 1.0 <= analysis.best_result["loss"] < 1.5625
