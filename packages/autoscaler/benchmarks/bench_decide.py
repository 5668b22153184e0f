"""Time of one decision step of the pure scaling policy (see README.md)."""

from __future__ import annotations

import argparse
import statistics
import time

from rayfield.autoscaler.decisions import Decision, NodeTypeSpec, NodeView, ScalingPolicy

TYPES = {
    "head": NodeTypeSpec({"CPU": 0.0}, launch_hash="h"),
    "small": NodeTypeSpec({"CPU": 2.0}, 0, 2000, "s"),
    "big": NodeTypeSpec({"CPU": 8.0}, 0, 2000, "b"),
    "gpu": NodeTypeSpec({"CPU": 4.0, "GPU": 1.0}, 0, 100, "g"),
}
HEAD = NodeView("head", "head", is_head=True, launch_hash="h", total={"CPU": 0.0})
DEMAND = [{"CPU": 1.0}] * 8000 + [{"CPU": 1.0, "GPU": 1.0}] * 30 + [{"CPU": 6.0}] * 20


def scenarios() -> dict[str, list[NodeView]]:
    busy = [
        NodeView(f"w{i}", "big", launch_hash="b", total={"CPU": 8.0}, available={"CPU": 0.0})
        for i in range(500)
    ]
    return {"cold cluster (head only)": [HEAD], "warm cluster (500 busy nodes)": [HEAD, *busy]}


def time_decide(
    policy: ScalingPolicy, nodes: list[NodeView], repeats: int
) -> tuple[list[float], Decision]:
    """Seconds of each of ``repeats`` decision steps over DEMAND, and the decision."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        decision = policy.decide(nodes, DEMAND, now=0.0)
        times.append(time.perf_counter() - t0)
    return times, decision


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    policy = ScalingPolicy(TYPES, "head", max_workers=4000, upscaling_speed=1.0)
    print(f"{len(DEMAND)} demand shapes, {len(TYPES)} node types")
    for name, nodes in scenarios().items():
        times, decision = time_decide(policy, nodes, args.repeats)
        plan = {t: decision.launch.get(t, 0) + decision.waiting.get(t, 0) for t in TYPES}
        plan = {t: n for t, n in plan.items() if n}
        print(
            f"{name:32s} median {statistics.median(times) * 1000:7.1f} ms  "
            f"(min {min(times) * 1000:.1f})  plan {plan}"
        )


if __name__ == "__main__":
    main()
