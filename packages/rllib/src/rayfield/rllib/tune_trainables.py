"""Tune trainables for rllib's algorithms, by name: ``tune.run("PPO", config=...)``.

rayfield-tune finds these through the ``rayfield.tune.trainables`` entry points in
rllib's ``pyproject.toml`` (``PPO = "rayfield.rllib.tune_trainables:PPO"``, ...). Each
name is a ``tune.Trainable`` subclass built on first use by
`rayfield.rllib.tune_wrapper.make_trainable` (one trainer per trial; checkpoints are the
trainer's own). Importing this module imports neither Tune nor torch; looking a name up
imports rayfield-tune, so it needs ``pip install 'rayfield-rllib[tune]'``.
"""

from __future__ import annotations

from typing import Any

from rayfield.rllib.agents.registry import ALGORITHMS


def __getattr__(name: str) -> Any:
    if name not in ALGORITHMS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from rayfield import tune
    from rayfield.rllib.tune_wrapper import make_trainable

    cls = make_trainable(tune, name)
    globals()[name] = cls  # one class per name, so Tune sees the same one each time
    return cls


__all__ = sorted(ALGORITHMS)
