"""A bundle's GPUs on rayfield.init()'s own node with 4 declared (fake) GPUs: work in the
bundle sees only the bundle's devices, in CUDA_VISIBLE_DEVICES and get_gpu_ids()."""

from __future__ import annotations

import os
import sys
from typing import Any

import cloudpickle
import pytest

import rayfield as rf
from rayfield.util import placement_group, remove_placement_group
from rayfield.util.scheduling_strategies import PlacementGroupSchedulingStrategy

cloudpickle.register_pickle_by_value(sys.modules[__name__])
pytestmark = pytest.mark.rayfield_runtime(num_cpus=4, num_gpus=4)


@rf.remote(num_cpus=0, num_gpus=1)
def seen() -> tuple[str, list[Any]]:
    return os.environ["CUDA_VISIBLE_DEVICES"], rf.get_gpu_ids()


@rf.remote(num_cpus=0, num_gpus=1)
class Holder:
    def seen(self) -> tuple[str, list[Any]]:
        return os.environ["CUDA_VISIBLE_DEVICES"], rf.get_gpu_ids()


def in_bundle(pg: Any, index: int) -> PlacementGroupSchedulingStrategy:
    return PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=index)


def test_work_in_a_bundle_sees_the_bundles_gpus(rayfield_module_runtime: Any) -> None:
    pg = placement_group([{"CPU": 1, "GPU": 1}, {"CPU": 1, "GPU": 2}])
    assert pg.wait(30)
    assert rf.available_resources()["GPU"] == 1.0
    # Bundle 0 holds device 3, bundle 1 devices 1 and 2; plain work keeps device 0.
    assert rf.get(seen.options(scheduling_strategy=in_bundle(pg, 0)).remote()) == ("3", [3])
    holder = Holder.options(scheduling_strategy=in_bundle(pg, 1)).remote()
    assert rf.get(holder.seen.remote()) == ("1", [1])
    # While the actor holds device 1, a task in the same bundle gets the other one.
    assert rf.get(seen.options(scheduling_strategy=in_bundle(pg, 1)).remote()) == ("2", [2])
    two = seen.options(num_gpus=2, scheduling_strategy=in_bundle(pg, 1))
    rf.kill(holder)
    assert rf.get(two.remote(), timeout=30) == ("1,2", [1, 2])
    assert rf.get(seen.remote()) == ("0", [0])  # outside the group
    _, [anywhere] = rf.get(seen.options(scheduling_strategy=in_bundle(pg, -1)).remote())
    assert anywhere in (1, 2, 3)  # bundle index -1: one of the group's devices
    remove_placement_group(pg)
    everything = seen.options(num_gpus=4).remote()
    assert rf.get(everything, timeout=30) == ("0,1,2,3", [0, 1, 2, 3])
