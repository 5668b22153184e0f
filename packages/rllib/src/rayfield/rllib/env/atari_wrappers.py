"""The DeepMind preprocessing of Atari games, applied to ALE envs automatically.

With ``preprocessor_pref: "deepmind"`` (the default) a rollout worker wraps every
env that `is_atari` recognises with `wrap_deepmind`, in this order:

1. up to 30 no-op actions after each reset (random count), the last ``skip`` = 4
   frames of each action max-pooled over the last two, and the frame warped to
   ``dim`` x ``dim`` (84) grayscale: gymnasium's `AtariPreprocessing` (frame skip
   only where the ALE env does not skip frames itself, e.g. ``*NoFrameskip-v4`` or
   ``ALE/*-v5`` with ``frameskip=1``);
2. `EpisodicLifeEnv`: losing a life ends the episode for learning, while the game
   goes on at the next reset (a real reset only at game over);
3. `FireResetEnv`: games that need FIRE to start get it after each reset;
4. `FrameStack`: the last ``k`` = 4 frames stacked on the channel axis, giving
   ``uint8[dim, dim, k]`` observations (``model.framestack: False`` keeps one).

Rewards are clipped to their sign for learning by the sampler (``clip_rewards:
None`` means "clip for Atari only"), so reported returns stay the game's score per
episode (per life, with episodic life).

``preprocessor_pref: "rllib"`` (or None) leaves Atari envs as they are.

Sources:
    Mnih et al., "Human-level control through deep reinforcement learning",
    Nature 518, 2015 (the preprocessing in its Methods).
    Machado et al., "Revisiting the Arcade Learning Environment", JAIR 61, 2018.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import gymnasium as gym
import numpy as np


def is_atari(env: Any) -> bool:
    """Whether `env` is an ALE game with raw ``(210, 160, 3)`` observations."""
    space = getattr(env, "observation_space", None)
    unwrapped = getattr(env, "unwrapped", env)
    return (
        type(unwrapped).__module__.startswith("ale_py")
        and space is not None
        and getattr(space, "shape", None) == (210, 160, 3)
    )


def _unwrapped(env: gym.Env) -> Any:
    return env.unwrapped


def _ale(env: gym.Env) -> Any:
    """The ALE interface of an ale-py env (``lives()``...)."""
    return _unwrapped(env).ale


class EpisodicLifeEnv(gym.Wrapper):
    """A lost life ends the episode (``terminated``); `reset` then continues the
    same game with one no-op step, and really resets only when the game is over."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.lives = 0
        self.game_over = True

    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.game_over = bool(terminated or truncated)
        lives = _ale(self.env).lives()
        if 0 < lives < self.lives:
            terminated = True
        self.lives = lives
        return obs, reward, terminated, truncated, info

    def reset(self, **kwargs: Any) -> Any:
        if self.game_over:
            obs, info = self.env.reset(**kwargs)
        else:  # a life was lost: go on from where the game is
            obs, _, terminated, truncated, info = self.env.step(0)
            if terminated or truncated:
                obs, info = self.env.reset(**kwargs)
        self.game_over = False
        self.lives = _ale(self.env).lives()
        return obs, info


class FireResetEnv(gym.Wrapper):
    """Press FIRE (action 1), then action 2, after each reset, for games that wait
    for it to start.

    Raises:
        ValueError: the game has no FIRE action.
    """

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        meanings = _unwrapped(env).get_action_meanings()
        if len(meanings) < 3 or meanings[1] != "FIRE":
            raise ValueError(f"FireResetEnv needs FIRE as action 1, got {meanings}")

    def reset(self, **kwargs: Any) -> Any:
        self.env.reset(**kwargs)
        for action in (1, 2):
            obs, _, terminated, truncated, info = self.env.step(action)
            if terminated or truncated:
                self.env.reset(**kwargs)
        return obs, info


class FrameStack(gym.Wrapper):
    """The last `k` frames (``uint8[H, W, 1]`` each) stacked to ``uint8[H, W, k]``;
    a reset fills the stack with the first frame."""

    def __init__(self, env: gym.Env, k: int) -> None:
        super().__init__(env)
        self.k = int(k)
        self.frames: deque[np.ndarray] = deque(maxlen=self.k)
        h, w, c = env.observation_space.shape  # type: ignore[misc]
        self.observation_space = gym.spaces.Box(0, 255, (h, w, c * self.k), np.uint8)

    def reset(self, **kwargs: Any) -> Any:
        obs, info = self.env.reset(**kwargs)
        for _ in range(self.k):
            self.frames.append(obs)
        return self._obs(), info

    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.frames.append(obs)
        return self._obs(), reward, terminated, truncated, info

    def _obs(self) -> np.ndarray:
        return np.concatenate(list(self.frames), axis=-1)


def wrap_deepmind(env: gym.Env, dim: int = 84, framestack: bool = True) -> gym.Env:
    """`env` (an ALE game) with the DeepMind preprocessing of the module docstring.

    Args:
        env: an ALE env with raw ``(210, 160, 3)`` frames.
        dim: the side of the square frames, in pixels.
        framestack: stack the last 4 frames (else one frame, ``uint8[dim, dim, 1]``).
    """
    skip = 4 if int(getattr(env.unwrapped, "_frameskip", 1)) == 1 else 1
    env = gym.wrappers.AtariPreprocessing(
        env,
        noop_max=30,
        frame_skip=skip,
        screen_size=dim,
        grayscale_obs=True,
        grayscale_newaxis=True,
    )
    env = EpisodicLifeEnv(env)
    meanings = _unwrapped(env).get_action_meanings()
    if len(meanings) >= 3 and meanings[1] == "FIRE":
        env = FireResetEnv(env)
    return FrameStack(env, 4 if framestack else 1)


def register_atari_envs() -> bool:
    """Register ale-py's games with gymnasium (``ALE/*``, ``*NoFrameskip-v4``...);
    False when ale-py is not installed (``pip install rayfield-rllib[atari]``)."""
    try:
        import ale_py
    except ImportError:
        return False
    gym.register_envs(ale_py)
    return True
