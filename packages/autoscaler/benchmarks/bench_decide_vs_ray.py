"""One autoscaling decision step, rayfield's ``ScalingPolicy.decide`` against Ray's
``ResourceDemandScheduler.get_nodes_to_launch`` (the v1 autoscaler's bin packing), on the
same node types and demand (see README.md).

Ray runs in its own interpreter (``--ray-python``, a Python with ``ray`` installed, e.g.
Ray 2.60; default: this one), in a subprocess that receives the scenario as JSON and
prints its timings and its plan; nothing of Ray is imported here.

    python bench_decide_vs_ray.py --ray-python /path/to/ray-venv/bin/python
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from typing import Any

from bench_decide import DEMAND, HEAD, TYPES, scenarios, time_decide

from rayfield.autoscaler.decisions import ScalingPolicy

RAY_SIDE = r"""
import json, statistics, sys, time
from ray.autoscaler._private.resource_demand_scheduler import ResourceDemandScheduler
from ray.autoscaler._private.node_provider_availability_tracker import NodeAvailabilitySummary

spec = json.load(sys.stdin)

class Provider:
    # What the scheduler reads of the nodes: their tags and addresses.
    def __init__(self, nodes):
        self.nodes = nodes
    def node_tags(self, node_id):
        return self.nodes[node_id]["tags"]
    def internal_ip(self, node_id):
        return self.nodes[node_id]["ip"]

out = {}
for name, nodes in spec["scenarios"].items():
    provider = Provider(nodes)
    sched = ResourceDemandScheduler(
        provider, spec["node_types"], spec["max_workers"], "head", spec["upscaling_speed"]
    )
    unused = {n["ip"]: n["available"] for n in nodes.values()}
    total = {n["ip"]: n["total"] for n in nodes.values()}
    times = []
    for _ in range(spec["repeats"]):
        t0 = time.perf_counter()
        launch, unfulfilled = sched.get_nodes_to_launch(
            list(nodes), {}, spec["demand"], unused, [], total, [],
            NodeAvailabilitySummary(node_availabilities={}),
        )
        times.append(time.perf_counter() - t0)
    out[name] = {"times": times, "plan": dict(launch), "unfulfilled": len(unfulfilled)}
print(json.dumps(out))
"""


def ray_spec(repeats: int, upscaling_speed: float) -> dict[str, Any]:
    """The scenarios of bench_decide.py in the shapes Ray's scheduler takes."""
    node_types = {
        name: {
            "resources": dict(t.resources),
            "min_workers": t.min_workers,
            "max_workers": t.max_workers,
            "node_config": {},
        }
        for name, t in TYPES.items()
    }
    out: dict[str, Any] = {}
    for name, views in scenarios().items():
        nodes = {}
        for i, v in enumerate(views):
            kind = "head" if v.is_head else "worker"
            nodes[v.node_id] = {
                "tags": {"ray-node-type": kind, "ray-user-node-type": v.node_type},
                "ip": f"10.{i // 65536}.{i // 256 % 256}.{i % 256}",
                "total": dict(v.total),
                "available": dict(v.available if v.available is not None else v.total),
            }
        out[name] = nodes
    return {
        "scenarios": out,
        "node_types": node_types,
        "max_workers": 4000,
        "upscaling_speed": upscaling_speed,
        "demand": DEMAND,
        "repeats": repeats,
    }


def run_ray(python: str, spec: dict[str, Any]) -> dict[str, Any]:
    done = subprocess.run(
        [python, "-c", RAY_SIDE],
        input=json.dumps(spec),
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        sys.exit(f"the Ray side failed:\n{done.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--ray-python",
        default=sys.executable,
        help="a Python with ray installed (default: this one, as in `nox -s bench`)",
    )
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--upscaling-speed", type=float, default=1.0)
    args = parser.parse_args()
    policy = ScalingPolicy(
        TYPES, HEAD.node_type, max_workers=4000, upscaling_speed=args.upscaling_speed
    )
    ray = run_ray(args.ray_python, ray_spec(args.repeats, args.upscaling_speed))
    print(
        f"{len(DEMAND)} demand shapes, {len(TYPES)} node types, "
        f"upscaling_speed {args.upscaling_speed}"
    )
    for name, nodes in scenarios().items():
        times, decision = time_decide(policy, nodes, args.repeats)
        ours = statistics.median(times)
        theirs = statistics.median(ray[name]["times"])
        print(f"{name}:")
        print(
            f"  rayfield  median {ours * 1000:8.1f} ms  launch now {dict(decision.launch)}, "
            f"held back by upscaling_speed {dict(decision.waiting)}"
        )
        print(
            f"  ray       median {theirs * 1000:8.1f} ms  launch now {ray[name]['plan']}, "
            f"unfulfilled {ray[name]['unfulfilled']}"
        )
        print(f"  ray / rayfield time: {theirs / ours:.1f}x")


if __name__ == "__main__":
    main()
