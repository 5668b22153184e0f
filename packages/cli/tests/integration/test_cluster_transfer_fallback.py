"""Two nodes, the second with its data channel switched off (``RAYFIELD_DATA_CHANNEL=0``):
objects still cross in both directions, on gRPC's ``PullObject`` stream."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from clusterutil import add_node, start_nodes, stop_in_background

import rayfield as rf


@rf.remote(resources={"x": 1})
def make(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(3_000_000)  # 24 MB


@rf.remote(resources={"x": 1})
def total(a: np.ndarray) -> float:
    return float(a.sum())


def test_objects_cross_on_grpc_when_a_node_has_no_data_channel(tmp_path: Path) -> None:
    address = start_nodes(tmp_path, count=1)
    add_node(address, tmp_path, '{"x": 10}', env={**os.environ, "RAYFIELD_DATA_CHANNEL": "0"})
    rf.init(address=address, temp_dir=str(tmp_path))
    try:
        expected = np.random.default_rng(3).standard_normal(3_000_000)
        assert np.array_equal(rf.get(make.remote(3)), expected)  # node 2 -> head
        a = np.random.default_rng(4).standard_normal(3_000_000)
        assert rf.get(total.remote(rf.put(a))) == float(a.sum())  # head -> node 2
    finally:
        rf.shutdown()
        stop_in_background(tmp_path)
    logs = "".join(p.read_text() for p in tmp_path.glob("session_*/logs/node.out"))
    assert "over gRPC" in logs  # the head fell back for node 2
