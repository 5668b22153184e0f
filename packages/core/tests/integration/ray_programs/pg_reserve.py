"""A Ray 2.x placement group program; only the imports name rayfield instead of ray."""

import rayfield as ray
from rayfield.util.placement_group import (
    placement_group,
    placement_group_table,
    remove_placement_group,
)
from rayfield.util.scheduling_strategies import PlacementGroupSchedulingStrategy

ray.init(num_cpus=2, num_gpus=2)

# One bundle of a CPU and a GPU, then wait for it both ways.
pg = placement_group([{"CPU": 1, "GPU": 1}])
ray.get(pg.ready(), timeout=30)
ready, unready = ray.wait([pg.ready()], timeout=30)
assert ready and not unready
assert placement_group_table(pg)["state"] == "CREATED"
assert ray.available_resources()["GPU"] == 1


@ray.remote(num_cpus=1, num_gpus=1)
class Trainer:
    def gpu_ids(self):
        return ray.get_gpu_ids()


trainer = Trainer.options(
    scheduling_strategy=PlacementGroupSchedulingStrategy(placement_group=pg)
).remote()
print("trainer GPUs:", ray.get(trainer.gpu_ids.remote(), timeout=30))

# A second group asks for more GPUs than are left: it waits.
pending = placement_group([{"GPU": 2}])
assert not pending.wait(timeout_seconds=0.5)
assert placement_group_table(pending)["state"] == "PENDING"

remove_placement_group(pg)
try:
    ray.get(trainer.gpu_ids.remote(), timeout=30)
    raise SystemExit("the actor outlived its placement group")
except ray.exceptions.RayActorError:
    print("actor ended with its group")
assert pending.wait(timeout_seconds=30)
print("state:", placement_group_table(pending)["state"])
ray.shutdown()
