"""``tune.run`` keeps its reference signature and builds a checked ``RunOptions``."""

from __future__ import annotations

import dataclasses
import inspect
from datetime import timedelta

import pytest

from rayfield.tune.error import TuneError
from rayfield.tune.run_options import RunOptions
from rayfield.tune.syncer import SyncConfig
from rayfield.tune.tune import run


def test_every_argument_of_run_is_an_option_with_the_same_default() -> None:
    params = inspect.signature(run).parameters
    fields = {f.name: f.default for f in dataclasses.fields(RunOptions)}
    named = {
        name: p.default
        for name, p in params.items()
        if name != "run_or_experiment" and p.kind is not p.VAR_KEYWORD
    }
    assert named == fields


def test_options_are_checked_when_built() -> None:
    with pytest.raises(TuneError, match="mode must be"):
        RunOptions(mode="best")
    with pytest.raises(TuneError, match="not both"):
        RunOptions(sync_to_cloud="a {source} {target}", sync_function="b {source} {target}")
    with pytest.raises(TypeError):
        RunOptions(scheduler="asha")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        RunOptions(time_budget_s=0)
    with pytest.raises(TuneError, match="does not support"):
        run(lambda c: None, not_an_option=1)


def test_derived_options() -> None:
    options = RunOptions(time_budget_s=timedelta(minutes=2), sync_function="cp {source} {target}")
    assert options.budget_s == 120.0 and options.cloud_syncer == "cp {source} {target}"
    assert RunOptions(sync_config=SyncConfig(upload_dir="file:///x")).upload_uri == "file:///x"
    assert RunOptions(upload_dir="file:///y").upload_uri == "file:///y"
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.verbose = 0  # type: ignore[misc]
