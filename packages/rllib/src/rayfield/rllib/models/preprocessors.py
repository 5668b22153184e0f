"""Preprocessors: turn an observation of any gymnasium space into a flat float vector.

``get_preprocessor(space)(space)`` picks one by space: `OneHotPreprocessor` for
Discrete, `MultiOneHot` for MultiDiscrete, `TupleFlatteningPreprocessor` /
`DictFlatteningPreprocessor` for Tuple / Dict (each part preprocessed, then
concatenated; Dict keys in sorted order, as gymnasium orders them), and
`NoPreprocessor` for Box. `transform` handles one observation, `transform_batch`
a list of them.
"""

from __future__ import annotations

from typing import Any

import numpy as np


class Preprocessor:
    """Base class. Subclasses set the output shape in `_init_shape` and implement
    `transform`.

    Args:
        obs_space: the gymnasium observation space.
        options: the model config (``MODEL_DEFAULTS`` keys), for custom preprocessors.
    """

    def __init__(self, obs_space: Any, options: dict[str, Any] | None = None) -> None:
        self._obs_space = obs_space
        self._options = options or {}
        self.shape: tuple[int, ...] = tuple(self._init_shape(obs_space, self._options))
        self._size = int(np.prod(self.shape)) if self.shape else 1

    def _init_shape(self, obs_space: Any, options: dict[str, Any]) -> tuple[int, ...]:
        raise NotImplementedError

    def transform(self, observation: Any) -> np.ndarray:
        """One observation -> float32[*shape]."""
        raise NotImplementedError

    def transform_batch(self, observations: list[Any]) -> np.ndarray:
        """A list of observations -> float32[B, *shape]."""
        return np.stack([self.transform(o) for o in observations]).astype(np.float32)

    @property
    def size(self) -> int:
        return self._size

    @property
    def observation_space(self) -> Any:
        """The flat Box the policy sees; for Dict and Tuple spaces it carries the
        env's space as ``original_space`` (see `restore_original_dimensions`)."""
        import gymnasium as gym

        space = gym.spaces.Box(-np.inf, np.inf, self.shape, dtype=np.float32)
        if isinstance(self._obs_space, (gym.spaces.Dict, gym.spaces.Tuple)):
            space.original_space = self._obs_space  # type: ignore[attr-defined]
        return space


class NoPreprocessor(Preprocessor):
    """Box observations, passed through as float32."""

    def _init_shape(self, obs_space: Any, options: dict[str, Any]) -> tuple[int, ...]:
        return tuple(obs_space.shape)

    def transform(self, observation: Any) -> np.ndarray:
        return np.asarray(observation, dtype=np.float32)

    def transform_batch(self, observations: list[Any]) -> np.ndarray:
        return np.asarray(observations, dtype=np.float32)


class OneHotPreprocessor(Preprocessor):
    """Discrete(n) -> one-hot float32[n]."""

    def _init_shape(self, obs_space: Any, options: dict[str, Any]) -> tuple[int, ...]:
        return (int(obs_space.n),)

    def transform(self, observation: Any) -> np.ndarray:
        out = np.zeros(self.shape, dtype=np.float32)
        out[int(observation) - int(getattr(self._obs_space, "start", 0))] = 1.0
        return out

    def transform_batch(self, observations: list[Any]) -> np.ndarray:
        idx = np.asarray(observations, dtype=np.int64) - int(getattr(self._obs_space, "start", 0))
        return np.eye(self.shape[0], dtype=np.float32)[idx]


class MultiOneHotPreprocessor(Preprocessor):
    """MultiDiscrete([n1, n2...]) -> concatenated one-hots float32[sum(n)]."""

    def _init_shape(self, obs_space: Any, options: dict[str, Any]) -> tuple[int, ...]:
        return (int(np.sum(obs_space.nvec)),)

    def transform(self, observation: Any) -> np.ndarray:
        parts = []
        for n, v in zip(np.asarray(self._obs_space.nvec).ravel(), np.asarray(observation).ravel()):
            one = np.zeros(int(n), dtype=np.float32)
            one[int(v)] = 1.0
            parts.append(one)
        return np.concatenate(parts)


class TupleFlatteningPreprocessor(Preprocessor):
    """Tuple spaces: each part preprocessed and flattened, then concatenated."""

    def _init_shape(self, obs_space: Any, options: dict[str, Any]) -> tuple[int, ...]:
        self.preprocessors = [get_preprocessor(s)(s, options) for s in obs_space.spaces]
        return (sum(p.size for p in self.preprocessors),)

    def transform(self, observation: Any) -> np.ndarray:
        return np.concatenate(
            [p.transform(o).ravel() for p, o in zip(self.preprocessors, observation)]
        )


class DictFlatteningPreprocessor(Preprocessor):
    """Dict spaces: each value (keys in the space's order) preprocessed and
    flattened, then concatenated."""

    def _init_shape(self, obs_space: Any, options: dict[str, Any]) -> tuple[int, ...]:
        self.keys = list(obs_space.spaces.keys())
        self.preprocessors = [get_preprocessor(s)(s, options) for s in obs_space.spaces.values()]
        return (sum(p.size for p in self.preprocessors),)

    def transform(self, observation: Any) -> np.ndarray:
        return np.concatenate(
            [p.transform(observation[k]).ravel() for k, p in zip(self.keys, self.preprocessors)]
        )


def get_preprocessor(space: Any) -> type[Preprocessor]:
    """The preprocessor class for a gymnasium space.

    Raises:
        TypeError: `space` is not a gymnasium Box, Discrete, MultiDiscrete, MultiBinary,
            Tuple or Dict space, nor a `Simplex`.
    """
    import gymnasium as gym

    if isinstance(space, gym.spaces.Discrete):
        return OneHotPreprocessor
    if isinstance(space, gym.spaces.MultiDiscrete):
        return MultiOneHotPreprocessor
    if isinstance(space, gym.spaces.Tuple):
        return TupleFlatteningPreprocessor
    if isinstance(space, gym.spaces.Dict):
        return DictFlatteningPreprocessor
    from rayfield.rllib.utils.spaces.simplex import Simplex

    if isinstance(space, (gym.spaces.Box, gym.spaces.MultiBinary, Simplex)):
        return NoPreprocessor
    raise TypeError(
        f"no preprocessor for observation space {space!r}: use a gymnasium Box, Discrete, "
        "MultiDiscrete, Tuple or Dict space, or register a custom preprocessor"
    )


def restore_original_dimensions(obs: Any, obs_space: Any) -> Any:
    """Split flattened observations back into the env's Dict / Tuple structure.

    Args:
        obs: ``float32[B, flat]`` (a torch tensor or numpy array) as the
            preprocessor made it.
        obs_space: the policy's observation space; without ``original_space``
            (not a Dict or Tuple observation) `obs` is returned as it is.

    Returns:
        A dict (Dict spaces) or tuple (Tuple spaces) of ``[B, *shape]`` parts: Box
        parts in their shape, Discrete parts one-hot, nested spaces nested.
    """
    original = getattr(obs_space, "original_space", None)
    if original is None:
        return obs
    return _unflatten(obs, original)


def _unflatten(obs: Any, space: Any) -> Any:
    import gymnasium as gym

    if isinstance(space, (gym.spaces.Dict, gym.spaces.Tuple)):
        items = space.spaces.items() if isinstance(space, gym.spaces.Dict) else enumerate(space)
        out, offset = {}, 0
        for key, sub in items:
            size = get_preprocessor(sub)(sub).size
            out[key] = _unflatten(obs[:, offset : offset + size], sub)
            offset += size
        return out if isinstance(space, gym.spaces.Dict) else tuple(out.values())
    if isinstance(space, gym.spaces.Box):
        return obs.reshape(obs.shape[0], *space.shape)
    return obs
