"""The example applications, run end to end on a real 2-CPU runtime with small settings.

Each test calls an example's ``main()`` and checks a result that a broken runtime or a broken
example would miss: an accuracy well above chance, a reward that clearly rose, word counts equal
to ``collections.Counter``, a tree sum bit-equal to numpy's. The examples live in
``packages/core/examples`` (not a package): the directory is put on ``sys.path`` here and on the
workers' ``PYTHONPATH`` before the runtime starts, so that workers can import them too.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import psutil
import pytest

pytest.importorskip("numpy")
pytest.importorskip("scipy")
pytest.importorskip("sklearn")
pytest.importorskip("gymnasium")

import rayfield as rf
from rayfield.testing import wait_for

EXAMPLES_DIR = Path(__file__).resolve().parents[2] / "examples"
WORKER_ENV = ("PYTHONPATH", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


@pytest.fixture(scope="class")
def runtime() -> Iterator[None]:
    """A 2-CPU runtime shared by the tests of a class.

    Afterwards no child process is left, and the environment and ``sys.path`` are as before.
    """
    saved = {name: os.environ.get(name) for name in WORKER_ENV}
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(EXAMPLES_DIR))
        example("_common").prepare_worker_environment()
        rf.init(num_cpus=2)
        try:
            yield
        finally:
            rf.shutdown()
            assert_no_child_processes()
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value


def example(name: str) -> ModuleType:
    return importlib.import_module(name)


def assert_no_child_processes(grace_s: float = 10.0) -> None:
    def alive() -> list[psutil.Process]:
        return [
            c
            for c in psutil.Process().children(recursive=True)
            if c.is_running() and c.status() != psutil.STATUS_ZOMBIE
        ]

    wait_for(lambda: not alive(), grace_s, "every child process to exit")


@pytest.mark.usefixtures("runtime")
class TestExamples:
    """Every example's ``main()`` on one shared runtime."""

    def test_parameter_server_sync(self) -> None:
        metrics = example("parameter_server_sync").main(num_workers=2, num_steps=150, eval_every=50)
        # Chance is 0.1; lost or misrouted gradients keep it far below the threshold.
        assert metrics["accuracy"] > 0.85
        assert metrics["ok"]

    def test_parameter_server_async(self) -> None:
        metrics = example("parameter_server_async").main(num_workers=2, steps_per_worker=100)
        assert metrics["updates"] == 200  # every fire-and-forget push was applied
        assert metrics["accuracy"] > 0.85

    def test_lbfgs_matches_serial(self) -> None:
        metrics = example("lbfgs").main(num_workers=2, max_iterations=50)
        assert metrics["max_grad_diff"] < 1e-9  # the shards' sum is the full-data gradient
        assert metrics["test_accuracy"] > 0.9
        assert metrics["loss"] < 0.4

    def test_evolution_strategies_improves(self) -> None:
        metrics = example("evolution_strategies").main(num_workers=2, num_iterations=12)
        assert len(metrics["rewards"]) == 12
        assert metrics["final_reward"] > metrics["first_reward"] + 100

    def test_policy_gradient_improves(self) -> None:
        metrics = example("policy_gradient").main(num_workers=2, num_iterations=15)
        assert metrics["episodes"] == 15 * 2 * 8
        assert metrics["final_reward"] > metrics["first_reward"] + 50

    @pytest.mark.parametrize(("mappers", "reducers", "chunk"), [(2, 2, 4), (3, 1, 7)])
    def test_mapreduce_counts_equal_counter(self, mappers: int, reducers: int, chunk: int) -> None:
        module = example("mapreduce_wordcount")
        metrics = module.main(num_workers=mappers, num_reducers=reducers, chunk_articles=chunk)
        expected = Counter(w for text in module.load_corpus() for w in module.tokenize(text))
        assert metrics["matches_counter"]
        assert metrics["total_words"] == sum(expected.values())
        assert metrics["distinct_words"] == len(expected)
        assert metrics["top10"] == module.top_words(expected, 10)
        per_mapper = [len(module.load_corpus()[i::mappers]) for i in range(mappers)]
        assert metrics["chunks"] == sum(-(-n // chunk) for n in per_mapper)  # ceil: streams drained

    def test_tree_reduce_equals_numpy(self) -> None:
        metrics = example("tree_reduce").main(num_blocks=16, block_size=1000, leaf_size=2)
        assert metrics["blocks"] == 16
        assert metrics["queue_exact"] and metrics["nested_exact"]
        assert metrics["max_error"] < 1e-9


def test_run_all_rejects_unknown_names() -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(EXAMPLES_DIR))
        assert example("run_all").main(["no_such_example"]) == 2


@pytest.mark.slow
@pytest.mark.timeout(660)  # the script's own 600 s limit, then the check of its output
def test_run_all_every_example_passes() -> None:
    """The script as a user runs it: its own runtime, every example, exit status 0."""
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES_DIR / "run_all.py"), "--num-cpus", "2"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    summary = proc.stdout.split("==== summary", 1)[1].strip().splitlines()
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(EXAMPLES_DIR))
        expected = len(example("run_all").EXAMPLES)
    assert len(summary) == expected and all(line.startswith("ok") for line in summary)
