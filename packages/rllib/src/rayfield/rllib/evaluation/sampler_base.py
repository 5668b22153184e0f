"""What every sampler shares: its settings, callbacks, worker and finished episodes.

`SamplerSettings` holds the config keys that decide how a sampler cuts env steps
into batches; the rollout worker builds it once (`SamplerSettings.from_config`)
and hands it to whichever sampler fits its env (`SyncSampler`,
`MultiAgentSampler`, `ExternalEnvSampler`). `SamplerBase` keeps the settings,
the callbacks, the worker and the metrics of finished episodes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from rayfield.rllib.evaluation.callbacks import DefaultCallbacks
from rayfield.rllib.evaluation.episode import RolloutMetrics

BATCH_MODES = ("truncate_episodes", "complete_episodes")


def clip_reward(r: np.ndarray, clip: Any) -> np.ndarray:
    """The ``clip_rewards`` rule: None/False keeps, True takes the sign, a number v
    clips to [-v, v], a pair (a, b) to [a, b]."""
    if clip is None or clip is False:
        return r
    if clip is True:
        return np.sign(r)
    if isinstance(clip, (tuple, list)):
        return np.clip(r, clip[0], clip[1])
    return np.clip(r, -float(clip), float(clip))


def check_sampling(batch_mode: str, fragment_length: int) -> None:
    """Raise ``ValueError`` for a ``batch_mode`` other than ``"truncate_episodes"`` or
    ``"complete_episodes"``, or a ``rollout_fragment_length`` under 1."""
    if batch_mode not in BATCH_MODES:
        raise ValueError(
            f"batch_mode must be 'truncate_episodes' or 'complete_episodes', got {batch_mode!r}"
        )
    if fragment_length < 1:
        raise ValueError(f"rollout_fragment_length must be >= 1, got {fragment_length}")


@dataclass(frozen=True)
class SamplerSettings:
    """How a sampler cuts env steps into batches.

    Attributes:
        fragment_length: env steps per env per chunk (``rollout_fragment_length``).
        batch_mode: ``"truncate_episodes"`` or ``"complete_episodes"``.
        horizon: end episodes after this many steps (None: the env decides).
        clip_rewards: see `clip_reward`.
        clip_actions: clip Box actions to the space before the env gets them (the
            batch keeps the unclipped action).
        seed: seed of the first reset of env ``j``: ``seed + j`` (None: unseeded).

    Raises:
        ValueError: unknown batch mode or fragment length < 1.
    """

    fragment_length: int
    batch_mode: str = "truncate_episodes"
    horizon: int | None = None
    clip_rewards: Any = None
    clip_actions: bool = True
    seed: int | None = None

    def __post_init__(self) -> None:
        check_sampling(self.batch_mode, self.fragment_length)

    @classmethod
    def from_config(cls, config: dict[str, Any], worker_index: int = 0) -> SamplerSettings:
        """The settings of a trainer config for worker `worker_index` (whose envs are
        seeded from ``seed + 1000 * worker_index``)."""
        seed = config.get("seed")
        horizon = config.get("horizon")
        return cls(
            fragment_length=int(config.get("rollout_fragment_length", 200)),
            batch_mode=config.get("batch_mode", "truncate_episodes"),
            horizon=int(horizon) if horizon else None,
            clip_rewards=config.get("clip_rewards"),
            clip_actions=bool(config.get("clip_actions", True)),
            seed=None if seed is None else int(seed) + 1000 * worker_index,
        )


class SamplerBase:
    """The state every sampler keeps besides its envs and policies.

    Args:
        callbacks: hooks for episodes and samples.
        settings: how to cut batches (see `SamplerSettings`).
        worker: the rollout worker, passed to callbacks (None outside a worker).

    Attributes:
        fragment_length, batch_mode, horizon, clip_rewards, clip_actions: from
        `settings`. metrics: episodes finished since the last `get_metrics`.
    """

    def __init__(
        self, callbacks: DefaultCallbacks, settings: SamplerSettings, worker: Any = None
    ) -> None:
        self.callbacks = callbacks
        self.settings = settings
        self.worker = worker
        self.fragment_length = settings.fragment_length
        self.batch_mode = settings.batch_mode
        self.horizon = settings.horizon
        self.clip_rewards = settings.clip_rewards
        self.clip_actions = settings.clip_actions
        self.metrics: list[RolloutMetrics] = []

    def clips_box(self, space: Any) -> bool:
        """Whether actions of `space` are clipped before the env gets them (a float
        Box with ``clip_actions`` set)."""
        return bool(
            self.clip_actions and hasattr(space, "low") and np.issubdtype(space.dtype, np.floating)
        )

    def get_metrics(self) -> list[RolloutMetrics]:
        """Episodes finished since the last call."""
        out, self.metrics = self.metrics, []
        return out
