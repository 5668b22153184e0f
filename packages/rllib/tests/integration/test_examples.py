"""The examples run (one or two iterations each)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", ["custom_env", "custom_model", "custom_metrics_and_callbacks"])
def test_example_runs(name: str) -> None:
    result = load(name).main(2)
    assert result["training_iteration"] == 2 and result["timesteps_total"] > 0
    if name == "custom_metrics_and_callbacks":
        assert result["callback_ok"] and "pole_angle_mean" in result["custom_metrics"]
