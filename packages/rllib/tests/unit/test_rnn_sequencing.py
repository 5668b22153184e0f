"""Cutting batches into padded sequences for recurrent models."""

from __future__ import annotations

import numpy as np
import pytest

from rayfield.rllib.policy.rnn_sequencing import pad_batch_to_sequences, sequence_starts
from rayfield.rllib.policy.sample_batch import SampleBatch


def batch() -> SampleBatch:
    # episode 1: t 0..4; episode 2: t 0..1; episode 1 again, not contiguous (t 7..8)
    eps = [1, 1, 1, 1, 1, 2, 2, 1, 1]
    t = [0, 1, 2, 3, 4, 0, 1, 7, 8]
    return SampleBatch(
        {
            "obs": np.arange(9, dtype=np.float32)[:, None],
            "eps_id": np.array(eps),
            "t": np.array(t),
            "state_in_0": np.arange(9, dtype=np.float32)[:, None] * 10,
            "rewards": np.ones(9, dtype=np.float32),
        }
    )


def test_sequences_break_at_episodes_gaps_and_max_len() -> None:
    assert sequence_starts(batch(), 3).tolist() == [0, 3, 5, 7]
    assert sequence_starts(batch(), 10).tolist() == [0, 5, 7]
    assert sequence_starts(batch(), 1).tolist() == list(range(9))
    with pytest.raises(ValueError, match="max_seq_len"):
        sequence_starts(batch(), 0)


def test_padding_layout() -> None:
    out = pad_batch_to_sequences(batch(), 3)
    assert out["seq_lens"].tolist() == [3, 2, 2, 2]
    assert out["obs"][:, 0].tolist() == [0, 1, 2, 3, 4, 0, 5, 6, 0, 7, 8, 0]
    assert out["seq_mask"].tolist() == [1, 1, 1, 1, 1, 0, 1, 1, 0, 1, 1, 0]
    assert out["state_in_0"][:, 0].tolist() == [0, 30, 50, 70]  # the state at each start
    assert out["rewards"].sum() == 9
