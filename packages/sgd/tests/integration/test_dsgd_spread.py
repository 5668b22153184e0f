"""DistributedSGD's parameter-server shards are spread across the nodes of a two-node
cluster (started with the `rayfield` command, as rayfield-cli's tests do) and train."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import rayfield as rf
from rayfield.sgd import DistributedSGD

# The multi-node helpers live with rayfield-cli's tests (see rayfield.testing's docstring).
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "cli" / "tests" / "integration"))

from clusterutil import rayfield_cmd, start_nodes
from sgd_testing import assert_steps_learn


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Two nodes of 1 CPU each and this process as their driver; stopped afterwards."""
    temp_dir = tmp_path_factory.mktemp("rf")
    address = start_nodes(temp_dir)
    rf.init(address=address, temp_dir=str(temp_dir))
    try:
        yield address
    finally:
        rf.shutdown()
        rayfield_cmd("stop", "--temp-dir", str(temp_dir))


class Line:
    """y = w*x + b fitted to y = 0.1x + 0.3 (a ``rayfield.sgd.Model``)."""

    def __init__(self, worker_idx: int, device_idx: int) -> None:
        import torch

        self.torch = torch
        self.module = torch.nn.Linear(1, 1)
        self.optimizer = torch.optim.SGD(self.module.parameters(), lr=0.5)
        self.generator = torch.Generator().manual_seed(worker_idx)

    def get_loss(self) -> object:
        x = self.torch.rand(100, 1, generator=self.generator)
        return self.torch.nn.functional.mse_loss(self.module(x), 0.1 * x + 0.3)

    def get_optimizer(self) -> object:
        return self.optimizer


def test_parameter_server_shards_are_on_both_nodes(two_nodes: str) -> None:
    nodes = {n["NodeID"] for n in rf.nodes() if n["Alive"]}
    assert len(nodes) == 2
    sgd = DistributedSGD(Line, num_workers=2, strategy="ps", grad_shard_bytes=4)
    try:
        assert len(sgd.ps_actors) == 2
        where = rf.get([s.get_node_id.remote() for s in sgd.ps_actors], timeout=60)
        assert set(where) == nodes
        assert_steps_learn(sgd, 100)
    finally:
        sgd.shutdown()


def test_a_spread_placement_group_puts_the_workers_on_both_nodes(two_nodes: str) -> None:
    nodes = {n["NodeID"] for n in rf.nodes() if n["Alive"]}
    sgd = DistributedSGD(
        Line, num_workers=2, strategy="ps", grad_shard_bytes=4, placement_strategy="SPREAD"
    )
    try:
        table = rf.util.placement_group_table(sgd.placement_group)
        assert set(table["bundles_to_node_id"].values()) == nodes
        where = rf.get([s.get_node_id.remote() for s in sgd.ps_actors], timeout=60)
        assert set(where) == nodes  # shard j in bundle j: one on each node
        assert_steps_learn(sgd, 60)
    finally:
        sgd.shutdown()
