"""``tune.track``: the one-argument function API (``def f(config): track.log(acc=0.9)``)."""

from __future__ import annotations

from typing import Any

from rayfield.tune.session import get_trial_dir, report

__all__ = ["log", "trial_dir"]


def log(**metrics: Any) -> None:
    """Report one iteration's metrics (same as ``tune.report(**metrics)``)."""
    report(metrics)


def trial_dir() -> str:
    """The trial's directory."""
    return get_trial_dir()
