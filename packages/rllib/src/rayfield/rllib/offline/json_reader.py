"""`JsonReader`: experience batches from JSON-lines (and Parquet) files.

Each reader lists its files once (a directory, a glob, a file, or a list of these), then
reads one file at a time from its first line to its last, choosing the files in a random
order of its own (seeded by the worker index and the ``seed`` config key), and starts
over when all are read: RLlib's "files are chosen at random; the contents of a file are
read in order". Files ending in ``.parquet`` are read with `rayfield.rllib.offline.parquet`.

Before a batch is returned it is adapted to the worker's policies:

* ``actions_in_input_normalized: True``: the file's Box actions are in [-1, 1] and are
  mapped to the action space's bounds, ``low + (a + 1) / 2 * (high - low)`` (the policies
  here act in the env's units);
* the episode-end columns are completed: ``terminateds`` (and zero ``truncateds``) from
  ``dones`` when the data has only ``dones`` (as the reference's conversion example
  writes), ``dones`` from ``terminateds | truncateds`` otherwise;
* ``postprocess_inputs: True``: the columns the policy adds when it acts and the data
  lacks (``vf_preds``, ``action_dist_inputs``, ``action_logp`` of the logged actions) are
  computed with the *current* weights, then each episode fragment (rows of one ``eps_id``)
  goes through its policy's ``postprocess_trajectory``. So PPO, A2C or PG can train on
  data DQN wrote, as on-policy data of the current policy.
"""

from __future__ import annotations

import glob
import json
import os
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from rayfield.rllib.offline.columns import OfflineDataError, decode_batch
from rayfield.rllib.offline.input_reader import InputReader
from rayfield.rllib.offline.io_context import IOContext
from rayfield.rllib.policy.sample_batch import DEFAULT_POLICY_ID, MultiAgentBatch, SampleBatch

__all__ = ["JsonReader", "adapt_batch", "list_input_files", "read_file_batches"]

SUFFIXES = (".json", ".parquet")


def list_input_files(inputs: Any) -> list[str]:
    """The files an ``input`` path names: each directory's ``*.json`` and ``*.parquet``
    files, each glob's matches, each file itself (``~`` expanded), sorted per entry.

    Raises:
        ValueError: `inputs` names no file.
    """
    entries = [inputs] if isinstance(inputs, (str, os.PathLike)) else list(inputs)
    files: list[str] = []
    for entry in entries:
        path = os.path.expanduser(os.fspath(entry))
        if os.path.isdir(path):
            files += sorted(
                str(p) for p in Path(path).iterdir() if p.suffix in SUFFIXES and p.is_file()
            )
        elif any(c in path for c in "*?["):
            files += sorted(p for p in glob.glob(path) if os.path.isfile(p))
        elif os.path.isfile(path):
            files.append(path)
        else:
            raise ValueError(f"input {path!r} is not a file, a directory or a glob")
    if not files:
        raise ValueError(
            f"input {inputs!r} holds no .json or .parquet files: write some with "
            "config['output'] or JsonWriter first"
        )
    return files


def read_file_batches(path: str) -> Iterator[SampleBatch | MultiAgentBatch]:
    """The batches of one file, in order (blank lines are skipped).

    Raises:
        OfflineDataError: a line that is not a batch (names the file and line).
        OSError: the file cannot be read.
    """
    if path.endswith(".parquet"):
        from rayfield.rllib.offline.parquet import read_parquet_batches

        yield from read_parquet_batches(path)
        return
    with open(path, "rb") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{path}:{number}"
            try:
                obj = json.loads(line)
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                raise OfflineDataError(where, f"not valid JSON ({exc})") from None
            yield decode_batch(obj, where)


def _unsquash(actions: np.ndarray, space: Any) -> np.ndarray:
    low, high = space.low, space.high
    out = low + (np.clip(actions, -1.0, 1.0) + 1.0) * 0.5 * (high - low)
    return out.astype(space.dtype)


def _complete_done_columns(batch: SampleBatch) -> None:
    term, trunc, dones = SampleBatch.TERMINATEDS, SampleBatch.TRUNCATEDS, SampleBatch.DONES
    if term not in batch and dones in batch:
        batch[term] = batch[dones].astype(bool)
        if trunc not in batch:
            batch[trunc] = np.zeros(batch.count, dtype=bool)
    elif dones not in batch and term in batch:
        ends = batch[term].astype(bool)
        batch[dones] = ends | batch[trunc].astype(bool) if trunc in batch else ends


def _fill_policy_columns(batch: SampleBatch, policy: Any) -> None:
    """Add the action-time columns of `policy` that `batch` lacks (current weights)."""
    if not hasattr(policy, "compute_actions") or SampleBatch.CUR_OBS not in batch:
        return
    state = [batch[k] for k in sorted(batch) if k.startswith("state_in_")]
    _, _, extra = policy.compute_actions(
        batch[SampleBatch.CUR_OBS],
        state or None,
        batch.get(SampleBatch.PREV_ACTIONS),
        batch.get(SampleBatch.PREV_REWARDS),
    )
    for key, value in extra.items():
        if key not in batch and key not in (SampleBatch.ACTION_PROB, SampleBatch.ACTION_LOGP):
            batch[key] = value
    if SampleBatch.ACTION_LOGP in extra and SampleBatch.ACTION_LOGP not in batch:
        batch[SampleBatch.ACTION_LOGP] = policy.compute_log_likelihoods(
            batch[SampleBatch.ACTIONS],
            batch[SampleBatch.CUR_OBS],
            state or None,
            batch.get(SampleBatch.PREV_ACTIONS),
            batch.get(SampleBatch.PREV_REWARDS),
        )


def _adapt_policy_batch(batch: SampleBatch, policy: Any, config: dict[str, Any]) -> SampleBatch:
    _complete_done_columns(batch)
    space = getattr(policy, "action_space", None)
    if (
        config.get("actions_in_input_normalized")
        and hasattr(space, "low")
        and SampleBatch.ACTIONS in batch
    ):
        batch[SampleBatch.ACTIONS] = _unsquash(batch[SampleBatch.ACTIONS], space)
    if config.get("postprocess_inputs") and batch.count:
        _fill_policy_columns(batch, policy)
        pieces = batch.split_by_episode() if SampleBatch.EPS_ID in batch else [batch]
        batch = SampleBatch.concat_samples([policy.postprocess_trajectory(p) for p in pieces])
    return batch


def adapt_batch(batch: Any, ioctx: IOContext) -> Any:
    """A batch read from a file made ready for the worker's policies (see the module
    docstring); returned unchanged without a worker.

    Raises:
        OfflineDataError: a `MultiAgentBatch` names a policy the worker does not have.
    """
    worker = ioctx.worker
    if worker is None:
        return batch
    config = ioctx.config
    if isinstance(batch, MultiAgentBatch):
        out = {}
        for pid, b in batch.policy_batches.items():
            if pid not in worker.policy_map:
                raise OfflineDataError(
                    "input", f"batch of policy {pid!r}, which is not in {sorted(worker.policy_map)}"
                )
            out[pid] = _adapt_policy_batch(b, worker.policy_map[pid], config)
        return MultiAgentBatch(out, batch.count)
    policy = worker.policy_map.get(DEFAULT_POLICY_ID) or worker.policy
    return _adapt_policy_batch(batch, policy, config)


class JsonReader(InputReader):
    """Reads batches from offline files (see the module docstring).

    Args:
        inputs: a directory, a glob (``"/tmp/*.json"``), a file, or a list of them.
        ioctx: the worker context (its config and policies adapt the batches; its
            worker index seeds the file order).

    Raises:
        ValueError: `inputs` names no file.
    """

    def __init__(self, inputs: Any, ioctx: IOContext | None = None) -> None:
        self.ioctx = ioctx or IOContext()
        self.files = list_input_files(inputs)
        seed = self.ioctx.config.get("seed")
        self._rng = random.Random(
            None if seed is None else int(seed) + 1000 * self.ioctx.worker_index
        )
        self._order: list[str] = []
        self._batches: Iterator[Any] | None = None
        self.cur_file: str | None = None

    def _next_file(self) -> None:
        if not self._order:
            self._order = list(self.files)
            self._rng.shuffle(self._order)
        self.cur_file = self._order.pop()
        self._batches = read_file_batches(self.cur_file)

    def next(self) -> Any:
        """The next non-empty batch, adapted to the worker's policies.

        Raises:
            OfflineDataError: a malformed line or file (names it), or files that hold
                no rows at all.
        """
        files_without_rows = 0
        while True:
            if self._batches is None:
                self._next_file()
            assert self._batches is not None
            for batch in self._batches:
                if batch.count > 0:
                    return adapt_batch(batch, self.ioctx)
            self._batches = None
            files_without_rows += 1  # in this call: every file up to now gave no row
            if files_without_rows > len(self.files):
                raise OfflineDataError(str(self.files[0]), "the input files hold no rows")

    def read_all_files(self) -> Iterator[Any]:
        """Every batch of every file, once, in file order (not adapted)."""
        for path in self.files:
            yield from read_file_batches(path)

    def __repr__(self) -> str:
        return f"JsonReader({len(self.files)} files)"
