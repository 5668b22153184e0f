"""A fake executor for TrialRunner tests: trials follow synthetic curves, no processes."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from rayfield import tune
from rayfield.tune import actions as A
from rayfield.tune.runner import TrialRunner
from rayfield.tune.schedulers import TrialScheduler
from rayfield.tune.search import BasicVariantGenerator
from rayfield.tune.stopper import Stopper
from rayfield.tune.trial import Trial

Curve = Callable[[dict[str, Any], int], dict[str, Any]]


def make_runner(
    config: dict[str, Any],
    num_samples: int = 1,
    cpus: int = 2,
    scheduler: TrialScheduler | None = None,
    stopper: Stopper | None = None,
    **exp_kw: Any,
) -> TrialRunner:
    """A runner over one experiment of ``config`` (no directory is written)."""
    exp = tune.Experiment(
        "exp",
        lambda c: None,
        config=config,
        num_samples=num_samples,
        local_dir="/tmp/tune-unit",
        **exp_kw,
    )
    gen = BasicVariantGenerator(seed=0)
    gen.add_configurations(exp)
    return TrialRunner(gen, scheduler, stopper or exp.stopper, cluster_resources={"CPU": cpus})


# The simulator's log names each action as the runner's classic decisions did.
KIND = {
    A.StartTrial: "start",
    A.TrainTrial: "continue",
    A.ReleaseTrial: "stop",
    A.PauseTrial: "pause",
    A.SaveTrial: "save",
    A.PersistCheckpoint: "persist",
    A.DeleteCheckpoint: "delete",
    A.ResetTrial: "reset",
    A.ExportModel: "export",
}


class Simulator:
    """Carries out a runner's decisions in memory, one result at a time, round-robin.

    Each trial's state is its iteration count; checkpoints store that count. ``curve(config,
    iteration)`` gives the metrics of an iteration; ``fail(trial, iteration)`` may return
    True to make that iteration raise.
    """

    def __init__(
        self,
        runner: TrialRunner,
        curve: Curve,
        fail: Callable[[Trial, int], bool] | None = None,
    ) -> None:
        self.runner, self.curve, self.fail = runner, curve, fail
        self.iteration: dict[str, int] = {}
        self.queue: deque[Trial] = deque()
        self.disk: dict[str, int] = {}
        self.log: list[tuple[str, str]] = []
        self.max_running = 0

    def apply(self, actions: list[A.Action]) -> None:
        for d in actions:
            t = d.trial
            self.log.append((KIND[type(d)], t.trial_id))
            if isinstance(d, A.StartTrial):
                self.iteration[t.trial_id] = self._restored(d.checkpoint) or 0
                self.queue.append(t)
            elif isinstance(d, A.TrainTrial):
                if t not in self.queue:
                    self.queue.append(t)
            elif isinstance(d, (A.ReleaseTrial, A.PauseTrial)):
                if isinstance(d, A.PauseTrial):
                    d.checkpoint.value = {"iter": self.iteration[t.trial_id]}
                if t in self.queue:
                    self.queue.remove(t)
            elif isinstance(d, A.SaveTrial):
                if d.checkpoint.storage == "memory":
                    d.checkpoint.value = {"iter": self.iteration[t.trial_id]}
                else:
                    self.disk[d.checkpoint.value] = self.iteration[t.trial_id]
            elif isinstance(d, A.DeleteCheckpoint):
                self.disk.pop(d.checkpoint.value, None)
            elif isinstance(d, A.ResetTrial):
                self.iteration[t.trial_id] = self._restored(d.checkpoint) or 0
        running = sum(1 for t in self.runner.get_trials() if t.status == Trial.RUNNING)
        self.max_running = max(self.max_running, running)

    def _restored(self, checkpoint: Any) -> int | None:
        if checkpoint is None or checkpoint.value is None:
            return None
        value = checkpoint.value
        if isinstance(value, dict):
            return int(value["iter"])
        return self.disk[value]

    def run(self, max_results: int = 100_000) -> None:
        for _ in range(max_results):
            self.apply(self.runner.step())
            if self.runner.is_finished():
                return
            if not self.queue:
                raise AssertionError("nothing runs but the runner is not finished")
            trial = self.queue.popleft()
            it = self.iteration[trial.trial_id] + 1
            self.iteration[trial.trial_id] = it
            if self.fail is not None and self.fail(trial, it):
                self.runner.on_trial_error(trial, f"Traceback: failure at {it}")
                continue
            result = {"training_iteration": it, **self.curve(trial.config, it)}
            self.runner.on_trial_result(trial, result)
        raise AssertionError("the experiment did not finish")


MIXED_SPACE = {
    "x": tune.uniform(-5, 5),
    "opt": {"lr": tune.loguniform(1e-4, 1)},
    "k": tune.randint(1, 4),
    "act": tune.choice(["a", "b"]),
}


def minimise_quadratic(searcher: Any, trials: int, first: int = 0) -> list[float]:
    """Drive ``searcher`` (metric ``loss``) over MIXED_SPACE on ``(x - 1)**2``; every
    suggestion is checked against the space. Returns the losses in order."""
    losses = []
    for i in range(first, first + trials):
        c = searcher.suggest(f"t{i}")
        assert -5 <= c["x"] <= 5 and 1e-4 <= c["opt"]["lr"] <= 1
        assert c["k"] in (1, 2, 3) and c["act"] in ("a", "b")
        loss = (c["x"] - 1.0) ** 2
        searcher.on_trial_result(f"t{i}", {"loss": loss, "training_iteration": 1})
        searcher.on_trial_complete(f"t{i}", {"loss": loss})
        losses.append(loss)
    return losses
