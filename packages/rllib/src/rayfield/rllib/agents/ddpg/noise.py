"""Exploration noise of DDPG and TD3, added to the actor's action in [-1, 1].

Two kinds: IID Gaussian noise ``stddev * N(0, I)`` (TD3, Fujimoto et al. 2018, Section 6)
and Ornstein-Uhlenbeck noise, time-correlated (DDPG, Lillicrap et al. 2016, Section 7):
per env row ``x <- x + theta * (0 - x) + sigma * N(0, I)``, noise ``ou_base_scale * x``.
Either is multiplied by a scale annealed linearly from ``initial_scale`` to
``final_scale`` over ``scale_timesteps`` env steps; during the first
``random_timesteps`` steps the actions are uniform instead.

Settings come from Ray's ``exploration_config`` (``{"type": "GaussianNoise" |
"OrnsteinUhlenbeckNoise", "random_timesteps", "stddev", "ou_theta", "ou_sigma",
"ou_base_scale", "initial_scale", "final_scale", "scale_timesteps"}``) when it is given,
otherwise from RLlib 0.7's keys (``exploration_noise_type``, ``exploration_gaussian_sigma``,
``exploration_ou_theta``, ``exploration_ou_sigma``, ``exploration_ou_noise_scale``,
``pure_exploration_steps``, and with ``exploration_should_anneal`` a scale from 1 to
``exploration_final_scale`` over ``exploration_fraction * schedule_max_timesteps``).

Sources:
    Lillicrap et al., "Continuous control with deep reinforcement learning", ICLR 2016.
    Fujimoto, van Hoof, Meger, "Addressing Function Approximation Error in Actor-Critic
    Methods", ICML 2018.
    Uhlenbeck, Ornstein, "On the Theory of the Brownian Motion", Physical Review 36, 1930.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["ActionNoise", "NoiseSettings", "noise_settings"]

_TYPES = {"GaussianNoise": "gaussian", "OrnsteinUhlenbeckNoise": "ou"}
# Ray's defaults per exploration type (keys missing from exploration_config take these).
_RAY_DEFAULTS: dict[str, dict[str, Any]] = {
    "gaussian": {
        "random_timesteps": 1000,
        "stddev": 0.1,
        "initial_scale": 1.0,
        "final_scale": 0.02,
        "scale_timesteps": 10000,
    },
    "ou": {
        "random_timesteps": 1000,
        "ou_theta": 0.15,
        "ou_sigma": 0.2,
        "ou_base_scale": 0.1,
        "initial_scale": 1.0,
        "final_scale": 0.02,
        "scale_timesteps": 10000,
    },
}


@dataclass(frozen=True)
class NoiseSettings:
    """Resolved exploration settings (see the module docstring); ``kind`` is
    ``"gaussian"`` or ``"ou"``."""

    kind: str
    random_timesteps: int = 0
    stddev: float = 0.1
    ou_theta: float = 0.15
    ou_sigma: float = 0.2
    ou_base_scale: float = 0.1
    initial_scale: float = 1.0
    final_scale: float = 1.0
    scale_timesteps: int = 1


def noise_settings(config: dict[str, Any]) -> NoiseSettings:
    """The exploration settings of a DDPG/TD3 config.

    Raises:
        ValueError: an unknown ``exploration_config`` type or key, an unknown
            ``exploration_noise_type``, or a negative number.
    """
    ec = dict(config.get("exploration_config") or {})
    if ec:
        kind = _TYPES.get(ec.pop("type", "OrnsteinUhlenbeckNoise"))
        if kind is None:
            raise ValueError(
                f"DDPG/TD3 exploration_config type must be one of {sorted(_TYPES)}, got "
                f"{config['exploration_config'].get('type')!r}"
            )
        values = {**_RAY_DEFAULTS[kind]}
        for key, value in ec.items():
            if key not in NoiseSettings.__dataclass_fields__ or key == "kind":
                raise ValueError(
                    f"unknown exploration_config key {key!r} for {kind} noise (known: "
                    f"type, {', '.join(sorted(_RAY_DEFAULTS['ou'].keys() | {'stddev'}))})"
                )
            values[key] = value
        settings = NoiseSettings(kind=kind, **values)
    else:
        kind = str(config["exploration_noise_type"])
        if config.get("smooth_target_policy"):  # RLlib 0.7: it also switches to Gaussian
            kind = "gaussian"
        if kind not in ("ou", "gaussian"):
            raise ValueError(f"exploration_noise_type must be 'ou' or 'gaussian', got {kind!r}")
        anneal = bool(config["exploration_should_anneal"])
        settings = NoiseSettings(
            kind=kind,
            random_timesteps=int(config["pure_exploration_steps"]),
            stddev=float(config["exploration_gaussian_sigma"]),
            ou_theta=float(config["exploration_ou_theta"]),
            ou_sigma=float(config["exploration_ou_sigma"]),
            ou_base_scale=float(config["exploration_ou_noise_scale"]),
            initial_scale=1.0,
            final_scale=float(config["exploration_final_scale"]) if anneal else 1.0,
            scale_timesteps=max(
                1, int(config["exploration_fraction"] * config["schedule_max_timesteps"])
            ),
        )
    for field in ("random_timesteps", "stddev", "ou_sigma", "ou_base_scale", "scale_timesteps"):
        if getattr(settings, field) < 0:
            raise ValueError(f"exploration {field} must be >= 0, got {getattr(settings, field)}")
    return settings


class ActionNoise:
    """Noise for batches of actions float32[B, k] (see the module docstring).

    Args:
        settings: the resolved settings.
        act_dim: k, the action size.
    """

    def __init__(self, settings: NoiseSettings, act_dim: int) -> None:
        self.settings = settings
        self.act_dim = int(act_dim)
        self.ou_state = torch.zeros(0, self.act_dim)
        self.fixed_scale: float | None = None

    def scale(self, timestep: int) -> float:
        """The noise scale after `timestep` env steps (linear from ``initial_scale`` to
        ``final_scale`` over ``scale_timesteps``, then constant), or ``fixed_scale``
        when that is set (Ape-X's per-worker exploration)."""
        if self.fixed_scale is not None:
            return self.fixed_scale
        s = self.settings
        frac = min(1.0, max(0, timestep) / max(1, s.scale_timesteps))
        return s.initial_scale + frac * (s.final_scale - s.initial_scale)

    def sample(self, rows: int, timestep: int) -> torch.Tensor:
        """Noise float32[rows, k] for the next actions of `rows` envs (OU: one state per
        row, restarted at zero when the number of rows changes)."""
        s = self.settings
        scale = self.scale(timestep)
        if s.kind == "gaussian":
            return (scale * s.stddev) * torch.randn(rows, self.act_dim)
        if self.ou_state.shape[0] != rows:
            self.ou_state = torch.zeros(rows, self.act_dim)
        self.ou_state += -s.ou_theta * self.ou_state + s.ou_sigma * torch.randn(rows, self.act_dim)
        return (scale * s.ou_base_scale) * self.ou_state
