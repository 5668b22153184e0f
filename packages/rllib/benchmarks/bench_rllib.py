"""PPO on CartPole-v1 until the mean return of the last 100 training episodes reaches 450:
wall time (start-up included), env steps, and sampling throughput, for rayfield-rllib next to
Stable-Baselines3 and RLlib when they are installed (``nox -s bench`` installs them).

    python bench_rllib.py [--seeds 3] [--timeout 300] [--only rayfield] [--peer-python PATH]
                          [--algo ppo|dqn|sac|td3|impala] [--rllib-cpus 2] [--start-timeout 120]

``--algo dqn`` runs DQN instead (``tuned_examples/cartpole-dqn.yaml``, same stop rule) for
rayfield-rllib and SB3's DQN with the settings SB3 has (see ``SB3_DQN``); RLlib is not run.
``--algo sac`` / ``--algo td3`` run SAC / TD3 on Pendulum-v1 until the mean return of the
last 10 episodes reaches -200, for rayfield-rllib (``tuned_examples/pendulum-sac.yaml`` /
``pendulum-td3.yaml``) and SB3 with the same settings, rl-zoo's Pendulum-v1 hyperparameters
(see ``SB3_SAC`` and ``SB3_TD3``); RLlib is not run.
``--algo impala`` runs IMPALA on CartPole-v1 (target 450 over 100 episodes) with 2 rollout
workers: rayfield-rllib's tuned example (``cartpole-impala.yaml``), rayfield-rllib's IMPALA
defaults (``IMPALA_DEFAULTS``: its default 256x256 model) and RLlib's IMPALA with its defaults
(``RLLIB_IMPALA``, 2 env runners on a Ray runtime of ``--rllib-cpus`` CPUs); SB3 has no IMPALA.
An RLlib that has not built its algorithm after ``--start-timeout`` s is reported as not
starting (Ray 2.60's IMPALA waits for a CPU for its learner on 2 CPUs) and is left out of the
later rounds. The programs are in ``_bench_rllib_peers.py``.

The libraries take turns: round k runs seed k of each, so a change in the machine's load
falls on all of them; the table gives medians over the rounds. Its "steps/s" column is env
steps per second of wall time, "after start" per second after start-up (the sampling
throughput).

Each run is a fresh process, so start-up (imports, workers) counts as it does for a user.
Start-up is the wall time from the process's first line (before the library's import)
until the first ``train()`` / ``learn()`` can start: for rayfield-rllib until
``PPOTrainer(...)`` returns, which includes ``rayfield.init()`` and both rollout workers
started, with their envs and policies built and the learner's weights set (the trainer
waits for them); for SB3 until ``PPO(...)`` returns (envs, policy, optimizer); for RLlib
until ``build()`` returns. The wall time to 450 includes it.
Ratios are printed against rayfield-rllib from the same run. All three use the same
hyperparameters (those of ``tuned_examples/cartpole-ppo.yaml``, SB3's rl-zoo CartPole
setting: 256 env steps per update from 8 or 16 envs, 20 epochs of one 256-row minibatch,
gamma 0.98, GAE lambda 0.8, clip 0.2, no value clipping, no entropy bonus, global gradient
norm clipped at 0.5, learning rate 1e-3). ``--peer-python`` runs SB3 and RLlib with another
interpreter (one where ``ray[rllib]`` and ``stable-baselines3`` are installed).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _bench_rllib_peers import (
    IMPALA_DEFAULTS,
    RAYFIELD,
    RLLIB,
    RLLIB_IMPALA,
    SB3,
    SB3_DQN,
    SB3_SAC,
    SB3_TD3,
)

# --algo -> (tuned example, target mean return, episodes in the mean)
ALGOS = {
    "ppo": ("cartpole-ppo", 450.0, 100),
    "dqn": ("cartpole-dqn", 450.0, 100),
    "sac": ("pendulum-sac", -200.0, 10),
    "td3": ("pendulum-td3", -200.0, 10),
    "impala": ("cartpole-impala", 450.0, 100),
}

# A row of the table: (name, program, module that must import, extra arguments)
Peer = tuple[str, str, str, tuple[str, ...]]


def peers(algo: str, rllib_cpus: int, start_timeout: float) -> list[Peer]:
    """The rows ``--algo`` compares, rayfield-rllib's tuned example first (the ratios' base)."""
    rows: list[Peer] = [("rayfield-rllib", RAYFIELD, "rayfield.rllib", ())]
    if algo == "impala":
        return [
            *rows,
            ("rayfield default", RAYFIELD, "rayfield.rllib", (IMPALA_DEFAULTS,)),
            ("RLlib", RLLIB_IMPALA, "ray.rllib", (str(rllib_cpus), str(start_timeout))),
        ]
    sb3 = {"ppo": SB3, "dqn": SB3_DQN, "sac": SB3_SAC, "td3": SB3_TD3}[algo]
    rows.append(("SB3", sb3, "stable_baselines3", ()))
    if algo == "ppo":
        rows.append(("RLlib", RLLIB, "ray.rllib", ()))
    return rows


def run(
    python: str,
    code: str,
    seed: int,
    tuned: str,
    timeout: float,
    target: float,
    window: int,
    extra: tuple[str, ...] = (),
) -> dict[str, Any] | None:
    """One fresh process; its JSON result, ``{"not_started": True, "waited_s": ...}`` when it
    printed ``NOT_STARTED`` or was killed before printing ``BUILT`` (only ``RLLIB_IMPALA``
    prints these), or None on failure."""
    argv = [python, "-c", code, str(seed), tuned, str(timeout), str(target), str(window), *extra]
    try:
        out = subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout + 120, check=True
        )
    except subprocess.TimeoutExpired as exc:
        partial = exc.stdout or b""
        text = partial.decode(errors="replace") if isinstance(partial, bytes) else partial
        if code is RLLIB_IMPALA and "BUILT" not in text:
            return {"not_started": True, "waited_s": timeout + 120}
        print(f"  failed: {exc}")
        return None
    except subprocess.CalledProcessError as exc:
        err = exc.stderr or ""
        print(f"  failed: {err.strip().splitlines()[-1:] if err else exc}")
        return None
    lines = out.stdout.strip().splitlines()
    if "NOT_STARTED" in lines:
        return {"not_started": True, "waited_s": float(extra[1]) if len(extra) > 1 else timeout}
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def available(python: str, module: str) -> bool:
    return subprocess.run([python, "-c", f"import {module}"], capture_output=True).returncode == 0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument(
        "--only", default=None, help="rayfield, sb3 or rllib: the rows whose name starts so"
    )
    parser.add_argument(
        "--algo",
        choices=sorted(ALGOS),
        default="ppo",
        help="ppo: the three-way table; dqn, sac, td3: rayfield-rllib and SB3 (RLlib not run); "
        "impala: rayfield-rllib's tuned and default IMPALA and RLlib's default IMPALA (SB3 has "
        "none)",
    )
    parser.add_argument(
        "--rllib-cpus", type=int, default=2, help="impala: CPUs of RLlib's Ray runtime"
    )
    parser.add_argument(
        "--start-timeout",
        type=float,
        default=120.0,
        help="impala: seconds RLlib's build() may wait for resources before it counts as "
        "not starting",
    )
    parser.add_argument(
        "--peer-python", default=sys.executable, help="the interpreter for SB3 and RLlib"
    )
    args = parser.parse_args()
    example, target, window = ALGOS[args.algo]
    tuned = str(Path(__file__).resolve().parents[1] / "tuned_examples" / f"{example}.yaml")
    chosen = []
    for name, code, module, extra in peers(args.algo, args.rllib_cpus, args.start_timeout):
        if args.only and not name.lower().startswith(args.only.lower()):
            continue
        python = sys.executable if name.startswith("rayfield") else args.peer_python
        if not available(python, module):
            print(f"{name}: not installed for {python}, skipped")
            continue
        chosen.append((name, code, python, extra))
    table: dict[str, list[dict[str, Any]]] = {}
    for seed in range(args.seeds):  # one round: every library once, in turn
        for name, code, python, extra in list(chosen):
            t = time.time()
            res = run(python, code, seed, tuned, args.timeout, target, window, extra)
            load = os.getloadavg()[0]
            print(f"{name} seed {seed}: {res} ({time.time() - t:.1f} s, load {load:.1f})")
            if res and res.get("not_started"):
                print(
                    f"{name}: did not start within {res['waited_s']:.0f} s on "
                    f"{args.rllib_cpus} CPUs (it waits for resources); left out of later rounds"
                )
                chosen.remove((name, code, python, extra))
            elif res:
                table.setdefault(name, []).append(res)
    base = statistics.median(r["wall_s"] for r in table.get("rayfield-rllib", [{"wall_s": 1.0}]))
    print(
        f"\n{'library':<17}{'wall s (median)':>16}{'start-up s':>12}{'env steps':>11}"
        f"{'steps/s':>9}{'after start':>12}{'reached':>9}{'vs rayfield':>12}  env steps per seed"
    )
    for name, runs in table.items():
        wall = statistics.median(r["wall_s"] for r in runs)
        start = statistics.median(r["startup_s"] for r in runs)
        steps = statistics.median(r["steps"] for r in runs)
        reached = sum(r["reward"] >= target for r in runs)
        print(
            f"{name:<17}{wall:>16.1f}{start:>12.2f}{steps:>11.0f}{steps / wall:>9.0f}"
            f"{steps / max(wall - start, 1e-9):>12.0f}{reached:>6}/{len(runs)}"
            f"{wall / base:>11.2f}x  " + ", ".join(f"{r['steps']:.0f}" for r in runs)
        )
    avg = os.getloadavg()
    print(f"load average at the end: {avg[0]:.1f} / {avg[1]:.1f} / {avg[2]:.1f} (1/5/15 min)")


if __name__ == "__main__":
    main()
