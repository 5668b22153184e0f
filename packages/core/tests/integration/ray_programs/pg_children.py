"""A Ray 2.x placement group program; only the imports name rayfield instead of ray."""

import rayfield as ray
from rayfield.util.placement_group import get_current_placement_group, placement_group
from rayfield.util.scheduling_strategies import PlacementGroupSchedulingStrategy

ray.init(num_cpus=4)

# Half the CPUs: work outside the group keeps the other half.
pg = placement_group([{"CPU": 1}, {"CPU": 1}], strategy="PACK", name="workers")
ray.get(pg.ready())


@ray.remote(num_cpus=1)
def child():
    return get_current_placement_group() is not None


@ray.remote(num_cpus=1)
def parent():
    # With capture on, the children go into the parent's group without saying so.
    return ray.get([child.remote() for _ in range(3)])


captured = parent.options(
    scheduling_strategy=PlacementGroupSchedulingStrategy(
        placement_group=pg, placement_group_capture_child_tasks=True
    )
).remote()
print("children in the group:", ray.get(captured))
assert ray.get(captured) == [True, True, True]

# The older options spell the same thing.
in_bundle = parent.options(placement_group=pg, placement_group_bundle_index=1).remote()
print("without capture:", ray.get(in_bundle))
assert ray.get(in_bundle) == [False, False, False]
assert ray.util.get_placement_group("workers").bundle_specs == pg.bundle_specs
ray.shutdown()
