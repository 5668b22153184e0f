"""Atari Pong for the examples: the environment and Karpathy's frame preprocessing.

``gymnasium`` and ``ale-py`` (whose wheel ships the Atari ROMs, so nothing is downloaded) are
imported inside :func:`make_pong`, so importing this module stays cheap for a worker. The
policies of ``rl_pong.py`` and ``a3c.py --env pong`` see the difference of two preprocessed
frames and choose between two actions, paddle up or down.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

# The reference's environment: frame skip drawn from 2..4, sticky actions with probability 0.25.
PONG_ENV_ID = "Pong-v0"
# ALE's minimal Pong action set is NOOP, FIRE, RIGHT, LEFT, RIGHTFIRE, LEFTFIRE; RIGHT moves the
# paddle up and LEFT moves it down.
UP, DOWN = 2, 3
# One preprocessed frame: 80 x 80 binary pixels, flattened.
PONG_OBS_SIZE = 80 * 80


def make_pong(seed: int | None = None) -> Any:
    """Creates gymnasium's ``Pong-v0`` from ale-py (observation ``uint8[210, 160, 3]``).

    Args:
        seed: seeds the emulator's frame skips and sticky actions at the first reset.
    """
    import ale_py
    import gymnasium

    gymnasium.register_envs(ale_py)
    with warnings.catch_warnings():  # gymnasium calls v0 out of date; it is the reference's
        warnings.simplefilter("ignore", DeprecationWarning)
        env = gymnasium.make(PONG_ENV_ID)
    env.reset(seed=seed)
    return env


def preprocess(frame: np.ndarray) -> np.ndarray:
    """Crops, downsamples and binarises one frame, as in Karpathy's ``pg-pong.py``.

    Args:
        frame: ``uint8[210, 160, 3]``, an ALE screen.

    Returns:
        ``float32[6400]``: rows 35..194 (the playing field), every second row and column, the red
        channel; the two background shades (144 and 109) become 0, paddles and ball 1.
    """
    field = frame[35:195:2, ::2, 0]
    return ((field != 144) & (field != 109) & (field != 0)).astype(np.float32).ravel()


def discount_pong_rewards(rewards: np.ndarray, gamma: float) -> np.ndarray:
    """Discounted returns-to-go that restart at every point scored (a nonzero reward).

    A Pong episode is a sequence of rallies; a rally's actions are credited with its own point
    only, so the running sum is reset at each nonzero reward when walking backwards.

    Args:
        rewards: ``float[T]``, the reward of each step (-1, 0 or +1).
        gamma: discount factor in (0, 1].

    Returns:
        ``float64[T]``.
    """
    out = np.zeros(len(rewards))
    running = 0.0
    for t in reversed(range(len(rewards))):
        if rewards[t] != 0:
            running = 0.0
        running = running * gamma + float(rewards[t])
        out[t] = running
    return out
