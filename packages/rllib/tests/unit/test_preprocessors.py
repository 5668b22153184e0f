from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from rayfield.rllib.models.preprocessors import (
    DictFlatteningPreprocessor,
    NoPreprocessor,
    OneHotPreprocessor,
    TupleFlatteningPreprocessor,
    get_preprocessor,
)


def test_box_passes_through() -> None:
    space = gym.spaces.Box(-1, 1, (3,))
    p = get_preprocessor(space)(space)
    assert isinstance(p, NoPreprocessor) and p.shape == (3,)
    assert p.transform(np.array([0.1, 0.2, 0.3])).dtype == np.float32


def test_discrete_one_hot() -> None:
    space = gym.spaces.Discrete(4)
    p = get_preprocessor(space)(space)
    assert isinstance(p, OneHotPreprocessor)
    assert p.transform(2).tolist() == [0, 0, 1, 0]
    assert p.transform_batch([0, 3]).tolist() == [[1, 0, 0, 0], [0, 0, 0, 1]]


def test_tuple_and_dict_flatten() -> None:
    t = gym.spaces.Tuple([gym.spaces.Discrete(2), gym.spaces.Box(0, 1, (2,))])
    p = get_preprocessor(t)(t)
    assert isinstance(p, TupleFlatteningPreprocessor) and p.shape == (4,)
    assert p.transform((1, np.array([0.5, 0.25]))).tolist() == [0, 1, 0.5, 0.25]
    d = gym.spaces.Dict({"b": gym.spaces.Discrete(3), "a": gym.spaces.Box(0, 1, (1,))})
    pd = get_preprocessor(d)(d)
    assert isinstance(pd, DictFlatteningPreprocessor) and pd.shape == (4,)
    obs = d.sample()
    flat = pd.transform(obs)
    parts = {"a": list(obs["a"]), "b": np.eye(3)[obs["b"]].tolist()}
    assert flat.tolist() == pytest.approx([x for k in pd.keys for x in parts[k]])
    batch = pd.transform_batch([obs, obs])
    assert batch.shape == (2, 4)


def test_unsupported_space() -> None:
    with pytest.raises(TypeError, match="no preprocessor"):
        get_preprocessor(gym.spaces.Text(5))
