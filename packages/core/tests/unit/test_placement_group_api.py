"""The placement group API without a runtime: names, options, strategies."""

from __future__ import annotations

import importlib
import pickle
import subprocess
import sys

import pytest

from rayfield._private.common import options as opt
from rayfield._private.common.placement_groups import GroupRef
from rayfield.util.placement_group import PlacementGroup
from rayfield.util.scheduling_strategies import PlacementGroupSchedulingStrategy

PG = PlacementGroup(b"\x0a" * 16, [{"CPU": 1.0}, {"CPU": 2.0}], "SPREAD")


@pytest.mark.parametrize(
    "first",
    [
        "from rayfield.util import placement_group",
        "import rayfield.util.placement_group as m; from rayfield.util import placement_group",
        "from rayfield.util.placement_group import placement_group",
    ],
)
def test_placement_group_is_the_function_whichever_import_comes_first(first: str) -> None:
    code = f"{first}\nimport rayfield.util\nassert callable(rayfield.util.placement_group)\n"
    code += "assert callable(placement_group)\n"
    code += "from rayfield.util.placement_group import PlacementGroup, placement_group_table\n"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_a_group_handle_pickles_and_describes_itself() -> None:
    again = pickle.loads(pickle.dumps(PG))
    assert again == PG and isinstance(again, PlacementGroup)
    assert PG.id == "0a" * 16 and PG.id.binary() == b"\x0a" * 16
    assert PG.bundle_count == 2 and PG.bundle_specs == [{"CPU": 1.0}, {"CPU": 2.0}]
    assert PG.strategy == "SPREAD"
    assert GroupRef.from_wire(PG.ref(1, True).to_wire()) == PG.ref(1, True)


def test_group_options_are_checked() -> None:
    out = opt.normalize({"placement_group": PG, "placement_group_bundle_index": 1}, actor=False)
    assert out["placement_group"] is PG
    with pytest.raises(ValueError, match="out of range: the group has 2"):
        opt.normalize({"placement_group": PG, "placement_group_bundle_index": 2}, actor=True)
    with pytest.raises(ValueError, match="needs placement_group="):
        opt.normalize({"placement_group_bundle_index": 0}, actor=False)
    with pytest.raises(ValueError, match="not both"):
        opt.normalize(
            {"placement_group": PG, "scheduling_strategy": PlacementGroupSchedulingStrategy(PG)},
            actor=False,
        )
    with pytest.raises(TypeError, match="must be a bool"):
        PlacementGroupSchedulingStrategy(PG, 0, placement_group_capture_child_tasks="yes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="must be an int"):
        PlacementGroupSchedulingStrategy(PG, "0")  # type: ignore[arg-type]
    assert opt.normalize({"placement_group": None}, actor=False) == {"placement_group": None}


def test_the_public_names_are_there() -> None:
    util = importlib.import_module("rayfield.util")
    for name in (
        "PlacementGroup",
        "placement_group",
        "remove_placement_group",
        "get_placement_group",
        "placement_group_table",
        "get_current_placement_group",
    ):
        assert name in util.__all__ and getattr(util, name) is not None
