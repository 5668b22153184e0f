"""The rollout side of ES and ARS: a numpy policy on a flat parameter vector
(`FlatPolicy`), episodes with it (`rollout`), and the worker actor that evaluates
antithetic perturbations drawn from the shared noise table (`ESWorker`).

Sources: Salimans et al. 2017, arXiv:1703.03864 (section 2.1, antithetic sampling
and the shared noise table); Mania, Guy, Recht, "Simple random search provides a
competitive approach to reinforcement learning", NeurIPS 2018, arXiv:1803.07055
(Algorithm 2, V2: states normalised by their running mean and deviation).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rayfield.rllib.agents.es.noise import SharedNoiseTable
from rayfield.rllib.env.env_context import EnvContext
from rayfield.rllib.models.preprocessors import get_preprocessor
from rayfield.rllib.utils.filter import get_filter

__all__ = ["ESWorker", "FlatPolicy", "rollout"]


class FlatPolicy:
    """A deterministic numpy policy whose parameters are one flat float64 vector: a
    fully connected net with ``tanh`` hidden layers of `hiddens` (``[]``: linear) and
    biases when `bias`. A Discrete action is the argmax of the outputs; a Box action is
    the output clipped to the space's bounds.

    Args:
        obs_size: preprocessed observation size. action_space: gymnasium Discrete or Box.
        hiddens: hidden layer sizes. bias: add biases.

    Raises:
        TypeError: an action space other than Discrete or Box.
    """

    def __init__(self, obs_size: int, action_space: Any, hiddens: list[int], bias: bool) -> None:
        import gymnasium as gym

        if isinstance(action_space, gym.spaces.Discrete):
            out = int(action_space.n)
            self.discrete = True
        elif isinstance(action_space, gym.spaces.Box):
            out = int(np.prod(action_space.shape))
            self.discrete = False
        else:
            raise TypeError(f"ES and ARS need a Discrete or Box action space, got {action_space}")
        self.action_space = action_space
        self.sizes = [obs_size, *[int(h) for h in hiddens], out]
        self.bias = bool(bias)
        self.num_params = sum(
            a * b + (b if self.bias else 0) for a, b in zip(self.sizes, self.sizes[1:])
        )
        self.layers: list[tuple[np.ndarray, np.ndarray | None]] = []
        self.set_flat(np.zeros(self.num_params))

    def initial_params(self, rng: np.random.Generator) -> np.ndarray:
        """Weights with unit-norm columns scaled by 1 (hidden) or 0.01 (output), as in
        OpenAI's ES starter code's normc init; zero biases. A linear policy starts at 0
        (ARS's ``M = 0``)."""
        if len(self.sizes) == 2:
            return np.zeros(self.num_params)
        parts = []
        for i, (a, b) in enumerate(zip(self.sizes, self.sizes[1:])):
            w = rng.standard_normal((a, b))
            w *= (0.01 if i == len(self.sizes) - 2 else 1.0) / np.sqrt((w**2).sum(0, keepdims=True))
            parts.append(w.ravel())
            if self.bias:
                parts.append(np.zeros(b))
        return np.concatenate(parts)

    def set_flat(self, theta: np.ndarray) -> None:
        """Use the flat vector `theta` (float[num_params]) as the parameters."""
        theta = np.asarray(theta, dtype=np.float64)
        self.layers, pos = [], 0
        for a, b in zip(self.sizes, self.sizes[1:]):
            w = theta[pos : pos + a * b].reshape(a, b)
            pos += a * b
            bias = None
            if self.bias:
                bias, pos = theta[pos : pos + b], pos + b
            self.layers.append((w, bias))

    def compute(self, obs: np.ndarray) -> Any:
        """The action for one preprocessed, filtered observation."""
        x = np.asarray(obs, dtype=np.float64).ravel()
        for i, (w, b) in enumerate(self.layers):
            x = x @ w if b is None else x @ w + b
            if i < len(self.layers) - 1:
                x = np.tanh(x)
        if self.discrete:
            return int(np.argmax(x))
        space = self.action_space
        return np.clip(x.reshape(space.shape), space.low, space.high).astype(space.dtype)


def rollout(
    env: Any,
    policy: FlatPolicy,
    preprocessor: Any,
    obs_filter: Any,
    update_filter: bool,
    timestep_limit: int | None = None,
    offset: float = 0.0,
    seed: int | None = None,
) -> tuple[float, float, int]:
    """One episode: ``(return, shifted return, length)``; the shifted return subtracts
    `offset` per step (ARS's survival-bonus shift; the plain return is reported).

    Ends when the env terminates or truncates, or after `timestep_limit` steps.
    """
    obs, _ = env.reset(seed=seed)
    total, length = 0.0, 0
    limit = timestep_limit or float("inf")
    while length < limit:
        action = policy.compute(obs_filter(preprocessor.transform(obs), update=update_filter))
        obs, reward, terminated, truncated, _ = env.step(action)
        total += float(reward)
        length += 1
        if terminated or truncated:
            break
    return total, total - offset * length, length


class ESWorker:
    """Evaluates perturbed policies ``theta +- noise_stdev * eps`` (antithetic pairs) and,
    with probability ``eval_prob`` per pair, the unperturbed ``theta``. Used as a
    remote actor (the trainer's workers) and as the trainer's local worker.

    Args:
        config: the trainer's config (``env_config``, ``model``, ``observation_filter``,
            ``noise_stdev``, ``eval_prob``, ``seed``, ``horizon``, ``offset``).
        env_creator: ``f(EnvContext) -> env``.
        noise: the shared noise table, float32[noise_size] (the object ref passed to an
            actor arrives as a zero-copy view of the store).
        worker_index: 0 for the local worker.
        policy_kind: ``"mlp"`` (ES: tanh hidden layers ``fcnet_hiddens`` with biases) or
            ``"linear"`` (ARS: ``a = M s``).

    Attributes:
        theta: the current parameters (on the local worker: the trainer's).
    """

    def __init__(
        self,
        config: dict[str, Any],
        env_creator: Any,
        noise: np.ndarray,
        worker_index: int = 0,
        policy_kind: str = "mlp",
    ) -> None:
        self.config = config
        self.env = env_creator(EnvContext(config.get("env_config"), worker_index))
        options = config.get("model") or {}
        self.preprocessor = get_preprocessor(self.env.observation_space)(
            self.env.observation_space, options
        )
        self.filter = get_filter(config["observation_filter"], self.preprocessor.shape)
        hiddens = [] if policy_kind == "linear" else list(options.get("fcnet_hiddens", [32, 32]))
        self.policy = FlatPolicy(
            self.preprocessor.size, self.env.action_space, hiddens, bias=policy_kind != "linear"
        )
        seed = config.get("seed")
        self.rng = np.random.default_rng(None if seed is None else int(seed) + 1000 * worker_index)
        self.noise = SharedNoiseTable(noise)
        self.theta = self.policy.initial_params(self.rng)
        self._episode_seeds = int(self.rng.integers(2**31)) if seed is not None else None

    def _next_seed(self) -> int | None:
        if self._episode_seeds is None:
            return None
        self._episode_seeds += 1
        return int(self._episode_seeds)

    def _episode(
        self, theta: np.ndarray, update_filter: bool, seed: int | None
    ) -> tuple[float, float, int]:
        self.policy.set_flat(theta)
        return rollout(
            self.env,
            self.policy,
            self.preprocessor,
            self.filter,
            update_filter,
            self.config.get("horizon"),
            float(self.config.get("offset", 0.0)),
            seed,
        )

    def do_rollouts(
        self, theta: np.ndarray, num_pairs: int, obs_filter: Any = None
    ) -> dict[str, Any]:
        """Evaluate `num_pairs` antithetic pairs around `theta`.

        Args:
            theta: float[num_params]. num_pairs: pairs to evaluate (>= 1).
            obs_filter: the trainer's merged filter, taken before sampling (None: keep).

        Returns:
            ``noise_indices`` int[P]; ``returns``, ``shifted_returns`` float[P, 2]
            (``+eps``, ``-eps``); ``lengths`` int[P, 2]; ``eval_returns`` /
            ``eval_lengths`` of the unperturbed episodes; ``filter``: this worker's filter
            with the changes of these rollouts in its buffer.
        """
        if obs_filter is not None:
            self.filter.sync(obs_filter)
            self.filter.clear_buffer()
        theta = np.asarray(theta, dtype=np.float64)
        sigma = float(self.config["noise_stdev"])
        dim = len(theta)
        indices, returns, shifted, lengths = [], [], [], []
        evals, eval_lengths = [], []
        for _ in range(int(num_pairs)):
            if self.rng.random() < float(self.config.get("eval_prob", 0.0)):
                ret, _, n = self._episode(theta, False, self._next_seed())
                evals.append(ret)
                eval_lengths.append(n)
            index = self.noise.sample_index(self.rng, dim)
            eps = self.noise.get(index, dim)
            seed = self._next_seed()  # both signs see the same env randomness
            pos = self._episode(theta + sigma * eps, True, seed)
            neg = self._episode(theta - sigma * eps, True, seed)
            indices.append(index)
            returns.append([pos[0], neg[0]])
            shifted.append([pos[1], neg[1]])
            lengths.append([pos[2], neg[2]])
        out = {
            "noise_indices": np.asarray(indices, dtype=np.int64),
            "returns": np.asarray(returns, dtype=np.float64).reshape(-1, 2),
            "shifted_returns": np.asarray(shifted, dtype=np.float64).reshape(-1, 2),
            "lengths": np.asarray(lengths, dtype=np.int64).reshape(-1, 2),
            "eval_returns": evals,
            "eval_lengths": eval_lengths,
            "filter": self.filter.as_serializable(),
        }
        self.filter.clear_buffer()
        return out

    # -- the trainer's local worker (`Trainer` calls these) ------------------------
    def compute_action(self, observation: Any) -> Any:
        """The unperturbed policy's action for one raw observation (filter not updated)."""
        self.policy.set_flat(self.theta)
        return self.policy.compute(self.filter(self.preprocessor.transform(observation), False))

    def set_global_vars(self, global_vars: dict[str, Any]) -> None:
        pass

    def apply(self, func: Any, *args: Any) -> Any:
        """``func(self, *args)`` (on a remote worker: in its process)."""
        return func(self, *args)

    def get_weights(self, policies: list[str] | None = None) -> dict[str, Any]:
        return {"default_policy": self.theta.copy()}

    def set_weights(self, weights: dict[str, Any], global_vars: Any = None) -> None:
        self.theta = np.asarray(weights["default_policy"], dtype=np.float64).copy()

    def get_filters(self, flush_after: bool = False) -> dict[str, Any]:
        return {"default_policy": self.filter.as_serializable()}

    def sync_filters(self, new_filters: dict[str, Any]) -> None:
        self.filter.sync(new_filters["default_policy"])

    def save(self) -> dict[str, Any]:
        """``theta`` and the filter, as plain lists and dicts."""
        return {"theta": self.theta.tolist(), "filter": self.filter.to_dict()}

    def restore(self, state: dict[str, Any]) -> None:
        from rayfield.rllib.utils.filter import filter_from_dict

        self.theta = np.asarray(state["theta"], dtype=np.float64)
        self.filter.sync(filter_from_dict(state["filter"]))  # type: ignore[arg-type]

    def stop(self) -> None:
        self.env.close()
