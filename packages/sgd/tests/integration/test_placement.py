"""``placement_strategy``: a trainer's replicas (DistributedSGD's workers and shards) run
in one placement group reserved up front, on a one-node 2-CPU cluster (SPREAD is best
effort there; the two-node SPREAD check is in test_dsgd_spread.py)."""

from __future__ import annotations

from typing import Any

import pytest
from sgd_testing import LineModel, assert_steps_learn, line_data, line_trainer, linear_model

import rayfield as rf
from rayfield.sgd import DistributedSGD, PyTorchTrainer
from rayfield.util import get_current_placement_group, placement_group_table


def _group_hex(_: Any) -> str | None:
    group = get_current_placement_group()
    return None if group is None else group.id.hex()


def test_spread_replicas_share_one_group_and_learn(cluster: Any) -> None:
    trainer = line_trainer(placement_strategy="SPREAD")
    try:
        group = trainer.placement_group.id.hex()
        assert placement_group_table()[group]["strategy"] == "SPREAD"
        assert rf.get([w.apply.remote(_group_hex) for w in trainer.workers]) == [group] * 2
        first = trainer.validate()["validation_loss"]
        for _ in range(3):
            trainer.train()
        assert trainer.validate()["validation_loss"] < first / 2
    finally:
        trainer.shutdown()
    assert placement_group_table()[group]["state"] == "REMOVED"


def test_pack_workers_and_shards_in_the_group(cluster: Any) -> None:
    sgd = DistributedSGD(
        LineModel, num_workers=2, strategy="ps", grad_shard_bytes=4, placement_strategy="PACK"
    )
    try:
        group = sgd.placement_group.id.hex()
        assert sgd.foreach_worker(_group_hex) == [group] * 2
        assert len(sgd.ps_actors) == 2
        assert_steps_learn(sgd, 60)
    finally:
        sgd.shutdown()
    assert placement_group_table()[group]["state"] == "REMOVED"


def test_a_group_the_cluster_cannot_place_fails_clearly(cluster: Any) -> None:
    # STRICT_SPREAD wants one node a bundle: two bundles on a one-node cluster never fit.
    before = set(placement_group_table())
    with pytest.raises(RuntimeError, match="was not placed within 2 s"):
        DistributedSGD(LineModel, num_workers=2, placement_strategy="STRICT_SPREAD", timeout_s=2)
    table = placement_group_table()
    assert {table[g]["state"] for g in set(table) - before} == {"REMOVED"}


def test_an_unknown_strategy_is_refused_before_anything_starts(cluster: Any) -> None:
    with pytest.raises(ValueError, match="placement_strategy must be None"):
        PyTorchTrainer(linear_model, line_data, placement_strategy="spread")
    with pytest.raises(ValueError, match="placement_strategy must be None"):
        DistributedSGD(LineModel, num_workers=1, placement_strategy="CLOSE")
