"""Ape-X DQN's replay throughput: rows added to and sampled from the replay shards per
second, summed over the shards.

    python bench_apex_replay.py [--seconds 10] [--shards 1,2] [--workers 2] [--cpus 2]
                                [--skip-raw] [--skip-apex]

Two measurements, each on a fresh ``rayfield.init(num_cpus=--cpus)``:

* ``raw``: the shards alone (`ReplayShard` actors, prioritized, 2,000,000-row capacity
  split over them). The driver keeps 4 ``add_batch`` calls of 50-row CartPole-shaped
  batches (with worker priorities) and 2 ``replay`` calls of 512 rows in flight per
  shard, as Ape-X's driver does, and sends each replayed batch's new priorities back; the
  table gives rows added/s and rows sampled/s over ``--seconds``. This is the shards'
  ceiling, with no env and no learner.
* ``apex``: Ape-X DQN itself on CartPole-v1 with ``--workers`` rollout workers and the
  same shard counts, ``tuned_examples/cartpole-apex.yaml``'s settings otherwise: rows
  added/s (= env steps sampled/s), rows sampled/s by the learner's replay calls, rows
  trained/s and weight syncs, over ``--seconds`` after learning starts (start-up and the
  first ``learning_starts`` steps excluded).

``nox -s bench`` runs it with its defaults (about a minute in all).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import numpy as np
import yaml

TUNED = Path(__file__).resolve().parents[1] / "tuned_examples" / "cartpole-apex.yaml"
FRAGMENT = 50
REPLAY_ROWS = 512


def cartpole_batch(rng: np.random.Generator) -> Any:
    from rayfield.rllib.policy.sample_batch import SampleBatch

    return SampleBatch(
        obs=rng.standard_normal((FRAGMENT, 4)).astype(np.float32),
        new_obs=rng.standard_normal((FRAGMENT, 4)).astype(np.float32),
        actions=rng.integers(0, 2, FRAGMENT),
        rewards=np.ones(FRAGMENT, dtype=np.float32),
        terminateds=np.zeros(FRAGMENT, dtype=bool),
        discounts=np.full(FRAGMENT, 0.99**3, dtype=np.float32),
        priorities=rng.uniform(0.1, 2.0, FRAGMENT).astype(np.float32),
    )


def raw(num_shards: int, seconds: float) -> dict[str, float]:
    """The shards alone (see the module docstring)."""
    import rayfield
    from rayfield.rllib.optimizers.async_replay_optimizer import ReplayShard

    rng = np.random.default_rng(0)
    cls = rayfield.remote(num_cpus=0)(ReplayShard)
    shards = [
        cls.remote(2_000_000 // num_shards, 0, True, 0.6, 0.4, REPLAY_ROWS, k)
        for k in range(num_shards)
    ]
    batch_ref = rayfield.put(cartpole_batch(rng))
    rayfield.get([s.add_batch.remote(batch_ref) for s in shards for _ in range(30)])
    base = rayfield.get([s.stats.remote() for s in shards])
    adds: dict[Any, Any] = {}
    replays: dict[Any, Any] = {}
    for s in shards:
        for _ in range(4):
            adds[s.add_batch.remote(batch_ref)] = s
        for _ in range(2):
            replays[s.replay.remote()] = s
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        ready, _ = rayfield.wait(list(adds) + list(replays), num_returns=1, timeout=1.0)
        for ref in ready:
            if ref in adds:
                s = adds.pop(ref)
                adds[s.add_batch.remote(batch_ref)] = s
            else:
                s = replays.pop(ref)
                out = rayfield.get(ref)
                prios = rng.uniform(0.1, 2.0, len(out["batch_indexes"]))
                s.update_priorities.remote(out["batch_indexes"], prios)
                replays[s.replay.remote()] = s
    elapsed = time.monotonic() - start
    end = rayfield.get([s.stats.remote() for s in shards])
    for s in shards:
        rayfield.kill(s)
    added = sum(e["num_added"] - b["num_added"] for e, b in zip(end, base, strict=True))
    sampled = sum(e["num_sampled"] - b["num_sampled"] for e, b in zip(end, base, strict=True))
    return {"added/s": added / elapsed, "sampled/s": sampled / elapsed, "seconds": elapsed}


def apex(num_shards: int, workers: int, seconds: float) -> dict[str, float]:
    """Ape-X DQN on CartPole-v1 (see the module docstring)."""
    from rayfield.rllib.agents.dqn.apex import ApexTrainer

    (exp,) = yaml.safe_load(TUNED.read_text()).values()
    config = {
        **exp["config"],
        "num_workers": workers,
        "optimizer": {**exp["config"]["optimizer"], "num_replay_buffer_shards": num_shards},
        "timesteps_per_iteration": 0,
        "min_iter_time_s": 1,
        "seed": 0,
    }
    trainer = ApexTrainer(env="CartPole-v1", config=config)
    try:
        opt = trainer.optimizer
        while opt.num_steps_trained == 0:
            trainer.train()
        s0 = opt.stats()
        start = time.monotonic()
        while time.monotonic() - start < seconds:
            trainer.train()
        elapsed = time.monotonic() - start
        s1 = opt.stats()
    finally:
        trainer.stop()

    def rate(key: str) -> float:
        return (s1[key] - s0[key]) / elapsed

    return {
        "added/s": rate("replay_shard_num_added"),
        "sampled/s": rate("replay_shard_num_sampled"),
        "trained/s": rate("num_steps_trained"),
        "weight syncs/s": rate("num_weight_syncs"),
        "seconds": elapsed,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--shards", default="1,2", help="comma-separated shard counts")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--cpus", type=int, default=2)
    parser.add_argument("--skip-raw", action="store_true")
    parser.add_argument("--skip-apex", action="store_true")
    args, _ = parser.parse_known_args()  # nox -s bench passes bench_rllib.py's too
    from rayfield.testing import local_runtime

    counts = [int(x) for x in args.shards.split(",") if x]
    print("| run | shards | rows added/s | rows sampled/s | rows trained/s | seconds |")
    print("|---|---:|---:|---:|---:|---:|")
    for n in counts:
        if not args.skip_raw:
            with local_runtime(num_cpus=args.cpus):
                r = raw(n, args.seconds)
            print(
                f"| raw shards | {n} | {r['added/s']:,.0f} | {r['sampled/s']:,.0f} | - | "
                f"{r['seconds']:.1f} |",
                flush=True,
            )
        if not args.skip_apex:
            with local_runtime(num_cpus=args.cpus):
                a = apex(n, args.workers, args.seconds)
            print(
                f"| Ape-X DQN, {args.workers} workers | {n} | {a['added/s']:,.0f} | "
                f"{a['sampled/s']:,.0f} | {a['trained/s']:,.0f} | {a['seconds']:.1f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
