"""Cutting a batch into padded sequences for recurrent models.

A recurrent policy's batch holds one row per env step with the model state before
the step in ``state_in_<i>`` columns. For training, the rows are cut into
sequences of at most ``max_seq_len`` consecutive steps of one agent in one episode
(a new sequence starts where ``eps_id``, ``agent_index`` or the step counter ``t``
breaks), and each sequence is padded with zero rows to ``max_seq_len``. The
padded columns have ``n_seq * max_seq_len`` rows; ``seq_lens`` (int32[n_seq])
gives each sequence's real length, ``seq_mask`` (bool[n_seq * max_seq_len]) marks
the real rows, and ``state_in_<i>`` keeps only the state at each sequence's start
(``[n_seq, ...]``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

SEQ_LENS = "seq_lens"
SEQ_MASK = "seq_mask"


def state_in_columns(batch: Any) -> list[str]:
    """The ``state_in_<i>`` column names of `batch`, in order."""
    names: list[str] = []
    while f"state_in_{len(names)}" in batch:
        names.append(f"state_in_{len(names)}")
    return names


def sequence_starts(batch: Any, max_seq_len: int) -> np.ndarray:
    """Row indices (int64[n_seq]) where sequences start.

    Raises:
        ValueError: `max_seq_len` < 1.
    """
    if max_seq_len < 1:
        raise ValueError(f"max_seq_len must be >= 1, got {max_seq_len}")
    n = len(batch["obs"])
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    brk = np.zeros(n, dtype=bool)
    brk[0] = True
    if "eps_id" in batch:
        brk[1:] |= batch["eps_id"][1:] != batch["eps_id"][:-1]
    if "agent_index" in batch:
        brk[1:] |= batch["agent_index"][1:] != batch["agent_index"][:-1]
    if "t" in batch:
        brk[1:] |= batch["t"][1:] != batch["t"][:-1] + 1
    # within each unbroken run, start a new sequence every max_seq_len rows
    run_start = np.maximum.accumulate(np.where(brk, np.arange(n), 0))
    brk |= (np.arange(n) - run_start) % max_seq_len == 0
    return np.flatnonzero(brk)


def pad_batch_to_sequences(
    batch: Any, max_seq_len: int, columns: list[str] | None = None
) -> dict[str, np.ndarray]:
    """The padded sequence layout of `batch` (see the module docstring).

    Args:
        batch: a `SampleBatch` (or dict of equal-length numpy columns) with
            ``state_in_<i>`` columns and ``eps_id`` / ``t`` to find the sequences.
        max_seq_len: the longest sequence and the padded length ``T``.
        columns: the per-step columns to pad (default: every numeric column but the
            state columns).

    Returns:
        ``{column: [n_seq * T, ...]}`` for the padded columns, plus ``seq_lens``,
        ``seq_mask`` and ``state_in_<i>`` (``[n_seq, ...]``).

    Raises:
        ValueError: `max_seq_len` < 1.
    """
    starts = sequence_starts(batch, max_seq_len)
    n = len(batch["obs"])
    seq_lens = np.diff(np.append(starts, n)).astype(np.int32)
    n_seq = len(starts)
    seq_id = np.repeat(np.arange(n_seq), seq_lens)
    offset = np.arange(n) - starts[seq_id]
    dest = seq_id * max_seq_len + offset
    states = state_in_columns(batch)
    if columns is None:
        columns = [
            k
            for k, v in batch.items()
            if np.asarray(v).dtype != np.dtype(object) and not k.startswith("state_")
        ]
    out: dict[str, np.ndarray] = {}
    for k in columns:
        v = np.asarray(batch[k])
        padded = np.zeros((n_seq * max_seq_len, *v.shape[1:]), dtype=v.dtype)
        padded[dest] = v
        out[k] = padded
    mask = np.zeros(n_seq * max_seq_len, dtype=bool)
    mask[dest] = True
    out[SEQ_MASK] = mask
    out[SEQ_LENS] = seq_lens
    for k in states:
        out[k] = np.asarray(batch[k])[starts]
    return out
