"""Checks a fractional ``num_gpus`` learner on a machine with a CUDA GPU (not collected
by pytest: run it by hand, ``python packages/rllib/tests/gpu_check.py``). Exits 1 on the
first failed check, 2 when there is no CUDA GPU here.

1. the learner device: ``cuda`` for ``num_gpus: 0.5``, ``cpu`` for a remote rollout
   worker without ``num_gpus_per_worker``;
2. PPO, DQN and QMIX trainers with ``num_gpus: 0.5`` in this process: their policy's
   weights (and DQN's / QMIX's target networks) on the GPU, two iterations learned there,
   weights still moving between GPU and CPU (get/set_weights, a checkpoint restored);
3. two trainers as rayfield actors asking 0.5 GPU each (``num_gpus=0.5``) on a local
   runtime of one GPU: both alive at once, each given GPU 0 (``get_gpu_ids``), each
   learning on cuda; one remote rollout worker (CPU) each;
4. ``tune.run("PPO", num_samples=2)`` with ``num_gpus: 0.5``: both trials run (the
   trainer's resource request reserves half a GPU per trial).
"""

from __future__ import annotations

import sys
import tempfile
import time
from typing import Any


def check(ok: bool, what: str) -> None:
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        sys.exit(1)


PPO_SMALL = {"train_batch_size": 256, "sgd_minibatch_size": 64, "num_sgd_iter": 2}
SMALL = {
    "PPO": PPO_SMALL,
    "DQN": {"learning_starts": 100, "timesteps_per_iteration": 200, "min_iter_time_s": 0},
    "QMIX": {"learning_starts": 100, "timesteps_per_iteration": 200, "min_iter_time_s": 0},
}
ENVS = {"PPO": "CartPole-v1", "DQN": "CartPole-v1", "QMIX": "grouped_twostep"}


def on_gpu(module: Any) -> bool:
    return all(p.device.type == "cuda" for p in module.parameters())


def local_trainers() -> None:
    from rayfield.rllib.agents.registry import get_trainer_class

    for name, extra in SMALL.items():
        config = {"num_gpus": 0.5, "num_workers": 0, **extra}
        trainer = get_trainer_class(name)(env=ENVS[name], config=config)
        try:
            policy = trainer.get_policy()
            check(policy.device.type == "cuda" and on_gpu(policy.model), f"{name}: model on cuda")
            target = getattr(policy, "target_model", None)
            if target is not None:
                check(on_gpu(target), f"{name}: target network on cuda")
            before = {k: v.copy() for k, v in policy.get_weights().items()}
            for _ in range(2):
                result = trainer.train()
            after = policy.get_weights()
            moved = any(abs(before[k] - after[k]).max() > 0 for k in before)
            check(moved, f"{name}: learned on cuda ({result['timesteps_total']} steps)")
            with tempfile.TemporaryDirectory() as tmp:
                path = trainer.save(tmp)
                trainer.restore(str(path))
            check(on_gpu(policy.model), f"{name}: model still on cuda after a restore")
        finally:
            trainer.stop()


class TrainerActor:
    """A PPO trainer in an actor; reports its GPU ids and device after learning."""

    def __init__(self) -> None:
        from rayfield.rllib.agents.ppo import PPOTrainer

        self.trainer = PPOTrainer(
            env="CartPole-v1", config={"num_gpus": 0.5, "num_workers": 1, **PPO_SMALL}
        )
        self.started = time.time()

    def run(self) -> dict[str, Any]:
        import rayfield

        result = self.trainer.train()
        policy = self.trainer.get_policy()
        remote = self.trainer.workers.remote_workers()[0]
        remote_device = rayfield.get(
            remote.apply.remote(lambda w: str(w.policy_map["default_policy"].device))
        )
        return {
            "gpu_ids": rayfield.get_gpu_ids(),
            "device": str(policy.device),
            "on_gpu": on_gpu(policy.model),
            "steps": result["timesteps_total"],
            "remote_device": remote_device,
            "started": self.started,
        }

    def stop(self) -> None:
        self.trainer.stop()


def actors_sharing_one_gpu() -> None:
    import rayfield

    rayfield.init(num_cpus=6, num_gpus=1)
    try:
        cls = rayfield.remote(num_gpus=0.5, num_cpus=1)(TrainerActor)
        actors = [cls.remote(), cls.remote()]
        try:  # both hold their half GPU until stopped: one GPU fits both only as halves
            reports = rayfield.get([a.run.remote() for a in actors], timeout=600)
        except Exception as exc:  # a timeout: the second never got its half
            check(False, f"two 0.5-GPU trainers at once on one GPU ({exc!r})")
        for i, r in enumerate(reports):
            print("     actor", i, r, flush=True)
            check(r["gpu_ids"] == [0], f"actor {i}: given GPU 0 (a half of it)")
            check(r["device"].startswith("cuda") and r["on_gpu"], f"actor {i}: learns on cuda")
            check(r["remote_device"] == "cpu", f"actor {i}: its rollout worker samples on cpu")
        check(len(reports) == 2, "two 0.5-GPU trainers ran at once on one GPU")
        rayfield.get([a.stop.remote() for a in actors])
    finally:
        rayfield.shutdown()


def tune_trials() -> None:
    try:
        from rayfield import tune
    except ImportError:
        print("skip tune: rayfield-tune is not installed", flush=True)
        return
    import rayfield

    rayfield.init(num_cpus=4, num_gpus=1)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            analysis = tune.run(
                "PPO",
                config={"env": "CartPole-v1", "num_gpus": 0.5, "num_workers": 0, **PPO_SMALL},
                stop={"training_iteration": 2},
                num_samples=2,
                local_dir=tmp,
                verbose=1,
            )
            trials = list(analysis)
            done = [t for t in trials if t.last_result.get("training_iteration") == 2]
            check(len(done) == 2, f"tune: both 0.5-GPU trials finished ({len(trials)} trials)")
    finally:
        rayfield.shutdown()


def main() -> None:
    import torch

    if not torch.cuda.is_available():
        print(f"no CUDA GPU here (torch {torch.__version__}): nothing to check")
        sys.exit(2)
    from rayfield.rllib.policy.torch_policy import learner_device

    print("GPU:", torch.cuda.get_device_name(0), flush=True)
    check(learner_device({"num_gpus": 0.5}).type == "cuda", "learner_device: cuda for 0.5")
    check(learner_device({"num_gpus": 0.5, "worker_index": 1}).type == "cpu", "worker: cpu")
    local_trainers()
    actors_sharing_one_gpu()
    tune_trials()
    print("all GPU checks passed", flush=True)


if __name__ == "__main__":
    main()
