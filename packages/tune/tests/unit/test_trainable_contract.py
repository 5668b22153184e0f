"""The Trainable contract: FunctionTrainable, class Trainables (modern and classic hooks)
and a plain class through the one adapter pass the same conformance tests."""

from __future__ import annotations

from typing import Any

import pytest

from rayfield import tune
from rayfield.tune.contract import as_trainable, conforms
from rayfield.tune.function_trainable import wrap_function
from rayfield.tune.registry import get_trainable_cls
from rayfield.tune.testing import TrainableConformance


def counting(config: dict[str, Any]) -> None:
    start = 0
    ckpt = tune.get_checkpoint()
    if ckpt is not None:
        start = ckpt.to_dict()["step"]
    for step in range(start, 100):
        tune.report(
            {"v": config["a"] * step}, checkpoint=tune.Checkpoint.from_dict({"step": step + 1})
        )


class Modern(tune.Trainable):
    def setup(self, config: dict[str, Any]) -> None:
        self.a, self.total = config["a"], 0.0

    def step(self) -> dict[str, Any]:
        self.total += self.a
        return {"total": self.total}

    def save_checkpoint(self, checkpoint_dir: str) -> dict[str, Any]:
        return {"total": self.total}

    def load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.total = checkpoint["total"]

    def reset_config(self, new_config: dict[str, Any]) -> bool:
        self.a = new_config["a"]
        return True


class Classic(tune.Trainable):
    def _setup(self, config: dict[str, Any]) -> None:
        self.total = 0

    def _train(self) -> dict[str, Any]:
        self.total += 1
        return {"total": self.total}

    def _save(self, checkpoint_dir: str) -> dict[str, Any]:
        return {"total": self.total}

    def _restore(self, checkpoint: dict[str, Any]) -> None:
        self.total = checkpoint["total"]


class Plain:
    """Not a tune.Trainable: implements the contract itself."""

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        self.config = dict(config or {})
        self.iteration = 0

    def train(self) -> dict[str, Any]:
        self.iteration += 1
        return {"training_iteration": self.iteration, "x": self.config.get("a", 0)}

    def save(self, checkpoint_dir: str | None = None) -> str:
        import os

        path = os.path.join(checkpoint_dir or ".", "plain.txt")
        with open(path, "w") as f:
            f.write(str(self.iteration))
        return path

    def restore(self, checkpoint_path: str) -> None:
        import os

        if os.path.isdir(checkpoint_path):
            checkpoint_path = os.path.join(checkpoint_path, "plain.txt")
        with open(checkpoint_path) as f:
            self.iteration = int(f.read())

    def stop(self) -> None:
        pass

    @classmethod
    def default_resource_request(cls, config: dict[str, Any]) -> Any:
        return None

    def reset_config(self, new_config: dict[str, Any]) -> bool:
        self.config = dict(new_config)
        return True


class TestFunctionTrainable(TrainableConformance):
    config = {"a": 2}

    def make_trainable(self, config: dict[str, Any]) -> Any:
        return wrap_function(counting)(config=config)


class TestModernTrainable(TrainableConformance):
    config = {"a": 1.5}

    def make_trainable(self, config: dict[str, Any]) -> Any:
        return Modern(config=config)


class TestClassicTrainable(TrainableConformance):
    def make_trainable(self, config: dict[str, Any]) -> Any:
        return Classic(config=config)


class TestPlainClass(TrainableConformance):
    config = {"a": 3}

    def make_trainable(self, config: dict[str, Any]) -> Any:
        return Plain(config=config)


class TestPlainClassAdapted(TrainableConformance):
    """The adapter's Trainable passes too: what Tune's actors run."""

    config = {"a": 3}

    def make_trainable(self, config: dict[str, Any]) -> Any:
        return as_trainable(Plain)(config=config)


def test_the_registry_adapts_a_conforming_class_and_refuses_others() -> None:
    cls = get_trainable_cls(Plain)
    assert issubclass(cls, tune.Trainable) and cls.__name__ == "Plain"
    assert get_trainable_cls(Modern) is Modern
    assert conforms(Plain) and conforms(Modern) and not conforms(object)

    class Half:
        def train(self) -> dict[str, Any]:
            return {}

    with pytest.raises(TypeError, match="lacks save, restore, stop"):
        get_trainable_cls(Half)


def test_the_adapter_keeps_the_counters_across_a_checkpoint(tmp_path: Any) -> None:
    adapted = as_trainable(Plain)(config={"a": 1})
    for _ in range(3):
        result = adapted.train()
    assert result["training_iteration"] == 3 and result["x"] == 1
    blob = adapted.save_to_object()
    fresh = as_trainable(Plain)(config={"a": 1})
    fresh.restore_from_object(blob)
    assert fresh.iteration == 3 and fresh.inner.iteration == 3
    assert fresh.train()["training_iteration"] == 4
    adapted.stop()
    fresh.stop()


def test_a_stopped_adapter_refuses_a_reset_so_tune_starts_a_fresh_actor() -> None:
    adapted = as_trainable(Plain)(config={"a": 1})
    assert adapted.reset({"a": 2}, {}) is True  # in place while the wrapped object lives
    assert adapted.train()["x"] == 2
    adapted.stop()  # a reused actor's previous trial is cleaned up before the next
    assert adapted.reset({"a": 3}, {}) is False
