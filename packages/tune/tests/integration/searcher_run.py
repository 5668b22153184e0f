"""The run every searcher wrapper's integration test shares: ``tune.run`` of a quadratic
(minimum 1.0 at x = 0.25) with the searcher behind a ``ConcurrencyLimiter`` of 2, real
trial actors, and the checks that hold for any searcher."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rayfield import tune
from rayfield.tune.search import ConcurrencyLimiter, Searcher


def quadratic(config: dict[str, Any]) -> None:
    tune.report(loss=(config["x"] - 0.25) ** 2 + config["offset"])


def run_searcher(searcher: Searcher, tmp_path: Path, name: str, num_samples: int) -> Any:
    """Runs ``num_samples`` trials suggested by ``searcher`` over ``x`` in [0, 1] and a
    constant ``offset`` of 1.0; checks that every trial ended and kept the space's
    bounds and constant; returns the analysis."""
    analysis = tune.run(
        quadratic,
        name=name,
        config={"x": tune.uniform(0, 1), "offset": 1.0},
        search_alg=ConcurrencyLimiter(searcher, max_concurrent=2),
        num_samples=num_samples,
        metric="loss",
        mode="min",
        local_dir=str(tmp_path),
        verbose=0,
    )
    trials = list(analysis)
    assert len(trials) == num_samples and all(t.status == "TERMINATED" for t in trials)
    assert all(t.config["offset"] == 1.0 and 0 <= t.config["x"] <= 1 for t in trials)
    return analysis
