"""The rayfield-sgd and rayfield-rllib checks of ``tools/gpu_check.py`` (run through it:
``python tools/gpu_check.py sgd|dsgd|rllib``).

sgd: ``PyTorchTrainer(use_gpu=True)`` (backend "auto" is nccl; one replica, so no group
forms), two replicas of half a GPU (gloo, picked by "auto"), and ``backend="nccl"`` for those
two refused with the trainer's own error; dsgd: ``DistributedSGD(gpu=True)`` on one worker;
rllib: PPO on CartPole-v1 with ``num_gpus=1``, its learner's parameters on ``cuda``.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from gpu_check import ROOT, guarded, init, report


# ---------------------------------------------------------------------------------- sgd
def _digits() -> Any:
    sys.path.insert(0, str(ROOT / "packages" / "sgd" / "examples"))
    import digits_cnn

    return digits_cnn


def _device_of(model: Any, loader: Any, criterion: Any, config: dict[str, Any]) -> dict[str, Any]:
    """validation_function: where the replica's model lives, and its accuracy."""
    import torch

    device = next(model.parameters()).device
    right = total = 0
    with torch.no_grad():
        for x, y in loader:
            right += int((model(x.to(device)).argmax(1) == y.to(device)).sum())
            total += len(y)
    return {
        "on_cuda": float(device.type == "cuda"),
        "val_accuracy": right / total,
        "num_samples": total,
    }


def check_sgd() -> None:
    import rayfield as rf

    init()
    try:
        guarded("sgd.trainer_use_gpu_nccl", _trainer_one_gpu)
        guarded("sgd.trainer_2x0.5_gpu_auto_gloo", _trainer_half_gpus_gloo)
        guarded("sgd.trainer_2x0.5_gpu_nccl_refused", _trainer_half_gpus_nccl)
    finally:
        rf.shutdown()


def _train(epochs: int, **kwargs: Any) -> tuple[Any, list[float], float, dict[str, Any]]:
    from rayfield.sgd import PyTorchTrainer

    d = _digits()
    trainer = PyTorchTrainer(
        d.digits_cnn,
        d.digits_data,
        optimizer_creator=d.cross_entropy_adam,
        config={"lr": 3e-3},
        batch_size=64,
        validation_function=_device_of,
        timeout_s=60,
        startup_timeout_s=60,
        **kwargs,
    )
    try:
        losses, rate = [], 0.0
        for _ in range(epochs):
            stats = trainer.train()
            losses.append(round(stats["train_loss"], 4))
            rate = stats["samples_per_s"]
        val = trainer.validate()
        accuracy = d.test_accuracy(trainer.get_model())
        return trainer.backend, losses, accuracy, {**val, "samples_per_s": round(rate)}
    finally:
        trainer.shutdown()


def _check_training(name: str, want_backend: str, **kwargs: Any) -> None:
    """12 epochs on digits: the backend "auto" picked, models on cuda, the loss down to a
    third at least and test accuracy 0.96 or more."""
    t = time.perf_counter()
    backend, losses, accuracy, val = _train(12, **kwargs)
    ok = (
        backend == want_backend
        and val["on_cuda"] == 1.0
        and losses[-1] < losses[0] / 3
        and accuracy >= 0.96
    )
    detail = f"backend={backend} losses={losses} test accuracy={accuracy:.4f} {val}"
    report(name, ok, detail, t)


def _trainer_one_gpu() -> None:
    _check_training("sgd.trainer_use_gpu_nccl", "nccl", use_gpu=True, num_replicas=1)


def _trainer_half_gpus_gloo() -> None:
    from rayfield.sgd import Resources

    half = Resources(num_cpus=1, num_gpus=0.5)  # backend "auto": gloo for shared GPUs
    _check_training(
        "sgd.trainer_2x0.5_gpu_auto_gloo", "gloo", num_replicas=2, resources_per_replica=half
    )


def _trainer_half_gpus_nccl() -> None:
    from rayfield.sgd import Resources

    t = time.perf_counter()
    try:
        _train(
            1,
            num_replicas=2,
            backend="nccl",
            resources_per_replica=Resources(num_cpus=1, num_gpus=0.5),
        )
        outcome, ok = "trained (NCCL does not allow this: unexpected)", False
    except ValueError as exc:
        outcome, ok = f"ValueError: {exc}", "share" in str(exc)
    except Exception as exc:
        outcome, ok = f"{type(exc).__name__} (not the trainer's own error): {exc}"[:600], False
    report("sgd.trainer_2x0.5_gpu_nccl_refused", ok, outcome, t)


def check_dsgd() -> None:
    import rayfield as rf
    from rayfield.sgd import DistributedSGD

    init()
    d = _digits()
    t = time.perf_counter()
    try:
        sgd = DistributedSGD(
            lambda worker, device: d.digits_cnn(),
            num_workers=1,
            gpu=True,
            strategy="simple",
            optimizer_creator=d.cross_entropy_adam,
            data_creator=d.digits_data,
            batch_size=64,
            config={"lr": 3e-3},
        )
        try:
            devices = sgd.foreach_model(lambda m: str(next(m.parameters()).device))
            first = sgd.step(fetch_stats=True)
            started = time.perf_counter()
            for _ in range(199):
                sgd.step()
            last = sgd.step(fetch_stats=True)
            steps_s = 200 / (time.perf_counter() - started)
            accuracy = sgd.for_model(lambda m: d.test_accuracy(m.cpu()))
        finally:
            sgd.shutdown()
        ok = (
            devices == ["cuda:0"]
            and last is not None
            and first is not None
            and (last < first / 3 and accuracy >= 0.95)
        )
        report(
            "dsgd.gpu_one_worker",
            ok,
            f"allreduce={sgd.allreduce} devices={devices} loss {first:.4f} -> {last:.4f} "
            f"after 201 steps, test accuracy={accuracy:.4f}, {steps_s:.0f} steps/s",
            t,
        )
    finally:
        rf.shutdown()


# -------------------------------------------------------------------------------- rllib
def check_rllib() -> None:
    import rayfield as rf
    from rayfield.rllib.agents.ppo import PPOTrainer

    init()
    t = time.perf_counter()
    config = {
        "num_gpus": 1,
        "num_workers": 2,
        "num_envs_per_worker": 8,
        "rollout_fragment_length": 16,
        "train_batch_size": 256,
        "sgd_minibatch_size": 256,
        "num_sgd_iter": 20,
        "lr": 0.001,
        "gamma": 0.98,
        "lambda": 0.8,
        "clip_param": 0.2,
        "kl_coeff": 0.0,
        "vf_clip_param": 1e6,
        "vf_loss_coeff": 0.5,
        "grad_clip": 0.5,
        "entropy_coeff": 0.0,
        "model": {"fcnet_hiddens": [64, 64]},
        "seed": 0,
    }
    try:
        trainer = PPOTrainer(config=config, env="CartPole-v1")
        policy = trainer.get_policy()
        devices = {str(p.device) for p in policy.model.parameters()}
        rewards, steps = [], 0
        while time.perf_counter() - t < 75:
            result = trainer.train()
            rewards.append(result["episode_reward_mean"])
            steps = result["timesteps_total"]
            if result["episode_reward_mean"] >= 450:
                break
        trainer.stop()
        first = next((r for r in rewards if r == r), float("nan"))
        ok = str(policy.device) == "cuda" and devices == {"cuda:0"} and rewards[-1] > 2 * first
        report(
            "rllib.ppo_num_gpus_1",
            ok,
            f"learner device={policy.device} params={devices}; mean return "
            f"{first:.1f} -> {rewards[-1]:.1f} in {len(rewards)} iterations, {steps} env "
            f"steps, {time.perf_counter() - t:.1f}s (450 reached={rewards[-1] >= 450})",
            t,
        )
    finally:
        rf.shutdown()


CHECKS = {"sgd": check_sgd, "dsgd": check_dsgd, "rllib": check_rllib}
