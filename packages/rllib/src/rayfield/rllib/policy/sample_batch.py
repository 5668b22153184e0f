"""Columnar batches of experience.

A `SampleBatch` is a dict of equal-length numpy columns (``obs``, ``actions``,
``rewards``...), one row per environment step. Rollout workers return them,
postprocessing adds columns to them (``advantages``, ``value_targets``) and the
learner slices them into minibatches. Keeping columns as numpy arrays makes
concatenation, shuffling and minibatching one vectorised operation per column.

A `MultiAgentBatch` maps policy ids to `SampleBatch` es, with ``count`` the number
of environment steps they came from.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np

DEFAULT_POLICY_ID = "default_policy"


class SampleBatch(dict):
    """A dict of equal-length numpy columns, one row per environment step.

    Args:
        *args, **kwargs: the columns, as for ``dict``; each value is converted with
            ``np.asarray`` (lists of numbers become arrays; infos stay object arrays).

    Raises:
        ValueError: the columns have different lengths.
    """

    CUR_OBS = "obs"
    NEXT_OBS = "new_obs"
    ACTIONS = "actions"
    REWARDS = "rewards"
    PREV_ACTIONS = "prev_actions"
    PREV_REWARDS = "prev_rewards"
    DONES = "dones"
    TERMINATEDS = "terminateds"
    TRUNCATEDS = "truncateds"
    INFOS = "infos"
    EPS_ID = "eps_id"
    UNROLL_ID = "unroll_id"
    AGENT_INDEX = "agent_index"
    T = "t"
    VF_PREDS = "vf_preds"
    ACTION_PROB = "action_prob"
    ACTION_LOGP = "action_logp"
    ACTION_DIST_INPUTS = "action_dist_inputs"
    BEHAVIOUR_LOGITS = "behaviour_logits"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        lengths = set()
        for key, value in list(self.items()):
            arr = value if isinstance(value, np.ndarray) else _as_column(value)
            dict.__setitem__(self, key, arr)
            lengths.add(len(arr))
        if len(lengths) > 1:
            sizes = {k: len(v) for k, v in self.items()}
            raise ValueError(f"SampleBatch columns must have equal lengths, got {sizes}")
        self.count = lengths.pop() if lengths else 0

    def __setitem__(self, key: str, value: Any) -> None:
        arr = value if isinstance(value, np.ndarray) else _as_column(value)
        if self and len(arr) != self.count:
            raise ValueError(f"column {key!r} has {len(arr)} rows, the batch has {self.count}")
        if not self:
            self.count = len(arr)
        dict.__setitem__(self, key, arr)

    def __len__(self) -> int:  # rows, as RLlib's len(batch)
        return self.count

    def __bool__(self) -> bool:
        return dict.__len__(self) > 0

    @property
    def env_steps(self) -> int:
        return self.count

    @staticmethod
    def concat_samples(samples: Iterable[SampleBatch | MultiAgentBatch]) -> Any:
        """Concatenate batches row-wise (the column sets must match).

        Returns:
            A `SampleBatch`, or a `MultiAgentBatch` when any input is one.

        Raises:
            ValueError: the batches have different columns.
        """
        given = [s for s in samples if s is not None]
        if any(isinstance(s, MultiAgentBatch) for s in given):
            return MultiAgentBatch.concat_samples(given)
        batches = [s for s in given if isinstance(s, SampleBatch) and s.count > 0]
        if not batches:
            return SampleBatch()
        keys = set(batches[0].keys())
        for s in batches[1:]:
            if set(s.keys()) != keys:
                raise ValueError(
                    f"cannot concatenate batches with columns {sorted(keys)} and {sorted(s.keys())}"
                )
        return SampleBatch({k: np.concatenate([s[k] for s in batches]) for k in batches[0]})

    def concat(self, other: SampleBatch) -> SampleBatch:
        """Return this batch followed by `other`."""
        return SampleBatch.concat_samples([self, other])

    def copy(self) -> SampleBatch:
        return SampleBatch({k: v.copy() for k, v in self.items()})

    def rows(self) -> Iterator[dict[str, Any]]:
        """Yield each row as a dict ``{column: value}``."""
        for i in range(self.count):
            yield {k: v[i] for k, v in self.items()}

    def columns(self, keys: Iterable[str]) -> list[np.ndarray]:
        return [self[k] for k in keys]

    def slice(self, start: int, end: int) -> SampleBatch:
        """Rows ``start:end`` (views, not copies)."""
        return SampleBatch({k: v[start:end] for k, v in self.items()})

    def shuffle(self, rng: np.random.Generator | None = None) -> SampleBatch:
        """Permute the rows in place (the same permutation for every column); returns self."""
        perm = (rng or np.random.default_rng()).permutation(self.count)
        for k, v in self.items():
            dict.__setitem__(self, k, v[perm])
        return self

    def minibatches(
        self, size: int, *, shuffle: bool = True, rng: np.random.Generator | None = None
    ) -> Iterator[SampleBatch]:
        """Split into minibatches of `size` rows (the last one may be smaller).

        Args:
            size: rows per minibatch, >= 1.
            shuffle: draw the rows in a random order (one permutation per call).
            rng: the random generator for the permutation.

        Raises:
            ValueError: `size` < 1.
        """
        if size < 1:
            raise ValueError(f"minibatch size must be >= 1, got {size}")
        order = (rng or np.random.default_rng()).permutation(self.count) if shuffle else None
        for start in range(0, self.count, size):
            if order is None:
                yield self.slice(start, start + size)
            else:
                idx = order[start : start + size]
                yield SampleBatch({k: v[idx] for k, v in self.items()})

    def split_by_episode(self) -> list[SampleBatch]:
        """Split into one batch per contiguous run of the same ``eps_id``.

        Raises:
            KeyError: the batch has no ``eps_id`` column.
        """
        eps = self[self.EPS_ID]
        if self.count == 0:
            return []
        bounds = np.flatnonzero(eps[1:] != eps[:-1]) + 1
        edges = [0, *bounds.tolist(), self.count]
        return [self.slice(a, b) for a, b in itertools.pairwise(edges)]

    def __repr__(self) -> str:
        cols = ", ".join(f"{k}: {v.dtype}{list(v.shape)}" for k, v in self.items())
        return f"SampleBatch({self.count} rows: {cols})"


def _as_column(value: Any) -> np.ndarray:
    if isinstance(value, list) and value and isinstance(value[0], dict):
        arr = np.empty(len(value), dtype=object)
        arr[:] = value
        return arr
    return np.asarray(value)


class MultiAgentBatch:
    """Batches of several policies from the same environment steps.

    Args:
        policy_batches: ``{policy_id: SampleBatch}``.
        count: the number of environment steps these batches came from.
    """

    def __init__(self, policy_batches: Mapping[str, SampleBatch], count: int) -> None:
        self.policy_batches = dict(policy_batches)
        self.count = int(count)

    @staticmethod
    def wrap_as_needed(batches: Mapping[str, SampleBatch], count: int) -> Any:
        """A plain `SampleBatch` when only the default policy is present, else a
        `MultiAgentBatch`."""
        if len(batches) == 1 and DEFAULT_POLICY_ID in batches:
            return batches[DEFAULT_POLICY_ID]
        return MultiAgentBatch(batches, count)

    @staticmethod
    def concat_samples(samples: Iterable[SampleBatch | MultiAgentBatch]) -> MultiAgentBatch:
        """Concatenate per policy; a plain `SampleBatch` counts as the default policy's."""
        per_policy: dict[str, list[SampleBatch]] = {}
        count = 0
        for s in samples:
            if isinstance(s, SampleBatch):
                s = MultiAgentBatch({DEFAULT_POLICY_ID: s}, s.count)
            for pid, b in s.policy_batches.items():
                per_policy.setdefault(pid, []).append(b)
            count += s.count
        return MultiAgentBatch(
            {pid: SampleBatch.concat_samples(bs) for pid, bs in per_policy.items()}, count
        )

    def copy(self) -> MultiAgentBatch:
        return MultiAgentBatch({k: v.copy() for k, v in self.policy_batches.items()}, self.count)

    def total(self) -> int:
        """Rows summed over all policies (agent steps)."""
        return sum(b.count for b in self.policy_batches.values())

    @property
    def env_steps(self) -> int:
        return self.count

    def __len__(self) -> int:
        return self.count

    def __repr__(self) -> str:
        return f"MultiAgentBatch({self.policy_batches!r}, count={self.count})"
