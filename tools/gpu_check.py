"""Checks of rayfield's GPU paths on a machine with a CUDA GPU (run by ``tools/gpu_check.sh``).

Each check runs in its own process: ``python tools/gpu_check.py CHECK``, CHECK one of
``env``, ``core``, ``nccl`` (here) and ``sgd``, ``dsgd``, ``rllib`` (``gpu_check_ml.py``).
Every result is one line::

    RESULT <name> PASS|FAIL|INFO <seconds> <what was seen>

PASS and FAIL are verdicts on what the issues ask (core: ``num_gpus`` tasks and actors, whole
and fractional, ``get_gpu_ids``, ``CUDA_VISIBLE_DEVICES``, GPU detection; sgd: ``use_gpu`` /
``gpu=True`` and the nccl backend; rllib: PPO's learner on ``cuda``); INFO lines report facts
that are no verdict (timings, a known limitation). The process exits 1 when a check failed.
The resnet example is run by the shell script as a user runs it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
FAILED: list[str] = []


def report(name: str, ok: bool | None, detail: str, started: float) -> None:
    """Print one RESULT line; ``ok`` None is INFO."""
    verdict = "INFO" if ok is None else ("PASS" if ok else "FAIL")
    if ok is False:
        FAILED.append(name)
    line = f"{name} {verdict} {time.perf_counter() - started:.1f}s {detail}"
    print(f"RESULT {line}", flush=True)
    if os.environ.get("GPU_CHECK_SUMMARY"):
        with open(os.environ["GPU_CHECK_SUMMARY"], "a") as summary:
            summary.write(line + "\n")


def guarded(name: str, fn: Callable[[], None]) -> None:
    """Run one check; an exception is its FAIL line."""
    started = time.perf_counter()
    try:
        fn()
    except Exception as exc:  # a check's own failure is reported, the others still run
        report(name, False, f"raised {type(exc).__name__}: {exc}"[:600], started)


def init(**kwargs: Any) -> Any:
    import rayfield as rf

    kwargs.setdefault("object_store_memory", 1 << 30)
    kwargs.setdefault("configure_logging", False)
    if os.environ.get("GPU_CHECK_FAKE_GPUS"):  # a dry run of the script on a machine without
        kwargs.setdefault("num_gpus", float(os.environ["GPU_CHECK_FAKE_GPUS"]))  # a GPU
    return rf.init(**kwargs)


# ---------------------------------------------------------------------------------- env
def cuda_driver_loaded() -> bool:
    """Whether this process has loaded the CUDA driver (libcuda), which reads
    CUDA_VISIBLE_DEVICES once, when it initialises."""
    return "libcuda.so" in Path("/proc/self/maps").read_text()


def check_env() -> None:
    t = time.perf_counter()
    import torch

    after_import = cuda_driver_loaded()
    cuda = torch.cuda.is_available()
    gpus = Path("/proc/driver/nvidia/gpus")
    listed = sorted(p.name for p in gpus.iterdir()) if gpus.is_dir() else None
    facts = {
        "torch": torch.__version__,
        "cuda": cuda,
        "devices": torch.cuda.device_count(),
        "name": torch.cuda.get_device_name(0) if cuda else None,
        "nccl": torch.cuda.nccl.version() if cuda else None,
        "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "/proc/driver/nvidia/gpus": listed,
        "libcuda loaded by import torch": after_import,
        "libcuda loaded by is_available()": cuda_driver_loaded(),
    }
    report("env", cuda, str(facts), t)
    guarded("env.cuda_init_probe", _cuda_init_probe)


_PROBE = """
import ctypes, os, sys, torch
from rayfield._private.runtime import gpus
before = gpus.cuda_initialized()
if sys.argv[1] == "ask":
    torch.cuda.is_available()
driver = ctypes.CDLL("libcuda.so.1", mode=os.RTLD_NOLOAD)
count = ctypes.c_int(-1)
rc = driver.cuDeviceGetCount(ctypes.byref(count))
print(dict(before=before, after=gpus.cuda_initialized(), rc=rc, count=count.value,
           cuda=torch.cuda.is_available()))
"""


def _cuda_init_probe() -> None:
    """What rayfield's worker sees of CUDA's state (``gpus.cuda_initialized``) in three
    processes: torch imported only; CUDA_VISIBLE_DEVICES='' and is_available(); '0' and
    is_available()."""
    t = time.perf_counter()
    seen = {}
    for label, cvd, mode in (("import", None, "import"), ("''", "", "ask"), ("'0'", "0", "ask")):
        env = dict(os.environ)
        if cvd is not None:
            env["CUDA_VISIBLE_DEVICES"] = cvd
        out = subprocess.run(
            [sys.executable, "-c", _PROBE, mode], env=env, capture_output=True, text=True
        )
        seen[label] = out.stdout.strip() or out.stderr[-300:]
    # A verdict on the driver probe only where it can tell: torch imported (no init) and
    # initialised with a device; under '' the driver answers as if never initialised.
    ok = "'after': False" in seen["import"] and "'after': True" in seen["'0'"]
    report("env.cuda_init_probe", ok, str(seen), t)


# --------------------------------------------------------------------------------- core
def _gpu_facts() -> dict[str, Any]:
    """What a task or actor sees of its GPUs (run inside it)."""
    import torch

    import rayfield as rf

    ctx = rf.get_runtime_context()
    facts: dict[str, Any] = {
        "pid": os.getpid(),
        "gpu_ids": rf.get_gpu_ids(),
        "resource_ids": rf.get_resource_ids().get("GPU", []),
        "accelerator_ids": ctx.get_accelerator_ids().get("GPU", []),
        "assigned": ctx.get_assigned_resources().get("GPU"),
        "cvd": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "cuda": torch.cuda.is_available(),
    }
    if facts["cuda"]:
        gen = torch.Generator().manual_seed(os.getpid())
        a = torch.randn(512, 512, dtype=torch.float64, generator=gen)
        b = torch.randn(512, 512, dtype=torch.float64, generator=gen)
        out = (a.float().cuda() @ b.float().cuda()).double().cpu()
        ref = a @ b
        facts["rel_err"] = float((out - ref).norm() / ref.norm())
        facts["device_name"] = torch.cuda.get_device_name(0)
    return facts


def check_core() -> None:
    import torch

    import rayfield as rf

    n = torch.cuda.device_count()
    t = time.perf_counter()
    init()
    report(
        "core.init_detects_gpus",
        rf.cluster_resources().get("GPU") == n and n >= 1,
        f"cluster GPU={rf.cluster_resources().get('GPU')} torch.cuda.device_count()={n} "
        f"(rf.init() in {time.perf_counter() - t:.2f}s)",
        t,
    )
    try:
        guarded("core.task_num_gpus_1", _task_whole_gpu)
        guarded("core.task_num_gpus_0.5", _tasks_half_gpu)
        guarded("core.actor_num_gpus_1", _actor_whole_gpu)
        guarded("core.actor_num_gpus_0.5", _actors_half_gpu)
        guarded("core.cpu_task_sees_no_gpu", _cpu_task)
        guarded("core.worker_reuse", _worker_reuse)
        guarded("core.torch_cpu_tasks_keep_workers", _torch_cpu_tasks)
    finally:
        rf.shutdown()
    guarded("core.detect_respects_cvd", _detect_with_cvd)


def _task_whole_gpu() -> None:
    import rayfield as rf

    t = time.perf_counter()
    facts = rf.get(rf.remote(num_gpus=1)(_gpu_facts).remote(), timeout=120)
    ok = (
        facts["gpu_ids"] == [0]
        and facts["resource_ids"] == [(0, 1.0)]
        and facts["accelerator_ids"] == ["0"]
        and facts["assigned"] == 1.0
        and facts["cvd"] == "0"
        and facts["cuda"]
        and facts["rel_err"] < 1e-5
    )
    report("core.task_num_gpus_1", ok, str(facts), t)


def _tasks_half_gpu() -> None:
    """Three tasks of half a GPU each: at most two run at once, and each sees GPU 0."""
    import rayfield as rf

    @rf.remote(num_cpus=0)
    class Meter:
        def __init__(self) -> None:
            self.running = self.peak = self.arrived = 0

        def enter(self) -> int:
            self.running += 1
            self.arrived += 1
            self.peak = max(self.peak, self.running)
            return self.arrived

        def leave(self) -> None:
            self.running -= 1

        def stats(self) -> tuple[int, int]:
            return self.arrived, self.peak

    @rf.remote(num_gpus=0.5)
    def half(meter: Any) -> dict[str, Any]:
        facts = _gpu_facts()
        deadline = time.monotonic() + 30
        arrived = rf.get(meter.enter.remote())
        while arrived < 2 and time.monotonic() < deadline:  # until a partner runs too
            time.sleep(0.05)
            arrived = rf.get(meter.stats.remote())[0]
        time.sleep(0.5)  # a third task must not start while these two hold the GPU
        rf.get(meter.leave.remote())
        return facts

    t = time.perf_counter()
    meter = Meter.remote()
    results = rf.get([half.remote(meter) for _ in range(3)], timeout=120)
    arrived, peak = rf.get(meter.stats.remote())
    results.append({"arrived": arrived})
    ok = peak == 2 and all(
        r["gpu_ids"] == [0]
        and r["resource_ids"] == [(0, 0.5)]
        and r["assigned"] == 0.5
        and r["cvd"] == "0"
        and r["cuda"]
        and r["rel_err"] < 1e-5
        for r in results[:3]
    )
    report("core.task_num_gpus_0.5", ok, f"peak concurrent={peak} (want 2) {results}", t)


def _actor_whole_gpu() -> None:
    import rayfield as rf

    @rf.remote(num_gpus=1)
    class GpuActor:
        def __init__(self) -> None:
            import torch

            self.x = torch.arange(1000, dtype=torch.float32, device="cuda")

        def facts(self) -> dict[str, Any]:
            return {**_gpu_facts(), "tensor": str(self.x.device), "sum": float(self.x.sum())}

    t = time.perf_counter()
    actor = GpuActor.remote()
    facts = rf.get(actor.facts.remote(), timeout=120)
    free_while_held = rf.available_resources().get("GPU", 0.0)
    pending = rf.remote(num_gpus=1)(_gpu_facts).remote()
    ready, _ = rf.wait([pending], timeout=2.0)
    blocked = not ready
    rf.kill(actor)
    after = rf.get(pending, timeout=120)
    ok = (
        facts["gpu_ids"] == [0]
        and facts["cvd"] == "0"
        and facts["tensor"] == "cuda:0"
        and facts["sum"] == 499500.0
        and facts["rel_err"] < 1e-5
        and free_while_held == 0.0
        and blocked
        and after["gpu_ids"] == [0]
    )
    report(
        "core.actor_num_gpus_1",
        ok,
        f"{facts}; GPU free while held={free_while_held}; a num_gpus=1 task waited for the "
        f"actor={blocked}, then ran with gpu_ids={after['gpu_ids']}",
        t,
    )


def _actors_half_gpu() -> None:
    import rayfield as rf

    @rf.remote(num_gpus=0.5, num_cpus=0)
    class HalfActor:
        def __init__(self) -> None:
            import torch

            self.x = torch.ones(1 << 20, device="cuda")

        def facts(self) -> dict[str, Any]:
            return {**_gpu_facts(), "tensor": str(self.x.device), "sum": float(self.x.sum())}

    t = time.perf_counter()
    actors = [HalfActor.remote() for _ in range(2)]
    facts = rf.get([a.facts.remote() for a in actors], timeout=120)
    free = rf.available_resources().get("GPU", 0.0)
    for a in actors:
        rf.kill(a)
    ok = (
        free == 0.0
        and facts[0]["pid"] != facts[1]["pid"]
        and all(
            f["gpu_ids"] == [0]
            and f["resource_ids"] == [(0, 0.5)]
            and f["tensor"] == "cuda:0"
            and f["sum"] == float(1 << 20)
            and f["rel_err"] < 1e-5
            for f in facts
        )
    )
    report("core.actor_num_gpus_0.5", ok, f"GPU free with both alive={free}; {facts}", t)


def _cpu_task() -> None:
    import rayfield as rf

    t = time.perf_counter()
    facts = rf.get(rf.remote(num_cpus=1)(_gpu_facts).remote(), timeout=120)
    # The contract: no GPU ids and CUDA_VISIBLE_DEVICES=''. Whether CUDA shows a device
    # ('cuda') depends on the worker: one kept after GPU tasks on a one-GPU node sees it.
    ok = facts["gpu_ids"] == [] and facts["cvd"] == "" and facts["accelerator_ids"] == []
    report("core.cpu_task_sees_no_gpu", ok, str(facts), t)


def _worker_reuse() -> None:
    """A worker whose CPU task asked torch about CUDA (so the driver read
    CUDA_VISIBLE_DEVICES='' once for the process), then given a GPU task."""
    import rayfield as rf

    t = time.perf_counter()
    cpu = rf.get([rf.remote(num_cpus=1)(_gpu_facts).remote() for _ in range(32)], timeout=120)
    gpu = rf.get([rf.remote(num_gpus=1)(_gpu_facts).remote() for _ in range(16)], timeout=120)
    cpu_pids = {f["pid"] for f in cpu}
    reused = [f for f in gpu if f["pid"] in cpu_pids]
    blind = [f for f in reused if not f["cuda"]]
    seeing = [f for f in cpu if f["cuda"]]
    detail = (
        f"{len(reused)} of {len(gpu)} GPU tasks ran in a worker whose earlier CPU task had "
        f"initialized CUDA; {len(blind)} of them found no CUDA device; "
        f"{len({f['pid'] for f in gpu})} worker processes ran the {len(gpu)} GPU tasks; "
        f"{len(seeing)} of {len(cpu)} CPU tasks (in {len(cpu_pids)} processes) saw a CUDA "
        "device (CUDA_VISIBLE_DEVICES='')"
    )
    report("core.worker_reuse", not blind, detail, t)


def _import_torch() -> int:
    import torch

    return os.getpid() if torch.ones(2).sum() == 2 else -1


def _torch_cpu_tasks() -> None:
    """CPU tasks that import torch but do not touch CUDA run in reused workers."""
    import rayfield as rf

    t = time.perf_counter()
    pids = rf.get([rf.remote(num_cpus=1)(_import_torch).remote() for _ in range(48)], timeout=120)
    report(
        "core.torch_cpu_tasks_keep_workers",
        len(set(pids)) < len(pids),
        f"{len(pids)} tasks ran in {len(set(pids))} worker processes",
        t,
    )


def _detect_with_cvd() -> None:
    t = time.perf_counter()
    code = (
        "import rayfield as rf; rf.init(object_store_memory=1<<28, configure_logging=False); "
        "print(rf.cluster_resources().get('GPU', 0.0)); rf.shutdown()"
    )
    seen = {}
    for cvd in ("", "0"):
        env = dict(os.environ, CUDA_VISIBLE_DEVICES=cvd)
        out = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
        )
        seen[cvd] = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else out.stderr[-300:]
    ok = seen == {"": "0.0", "0": "1.0"}
    report("core.detect_respects_cvd", ok, f"GPUs detected per CUDA_VISIBLE_DEVICES: {seen}", t)


# --------------------------------------------------------------------------------- nccl
def check_nccl() -> None:
    import rayfield as rf

    init()
    try:
        guarded("nccl.world_size_1", _nccl_world_1)
        guarded("nccl.two_ranks_one_gpu", _nccl_two_ranks_one_gpu)
    finally:
        rf.shutdown()


def _allreduce(address: str, rank: int, world: int, backend: str) -> float:
    import torch
    import torch.distributed as dist

    from rayfield.sgd.collective import join_group, leave_group

    join_group(address, rank, world, backend, 30.0)
    try:
        x = torch.full((1 << 20,), float(rank + 1), device="cuda")
        dist.all_reduce(x)
        torch.cuda.synchronize()
        return float(x[0])
    finally:
        leave_group()


def _nccl_world_1() -> None:
    import rayfield as rf
    from rayfield.sgd.collective import rendezvous_address

    t = time.perf_counter()
    address = rendezvous_address()
    value = rf.get(rf.remote(num_gpus=1)(_allreduce).remote(address, 0, 1, "nccl"), timeout=120)
    report("nccl.world_size_1", value == 1.0, f"all_reduce of ones on cuda = {value}", t)


def _nccl_two_ranks_one_gpu() -> None:
    """Raw torch.distributed: two ranks of half a GPU each on the same device (what NCCL
    refuses); a fact for the trainer's own check, not a verdict."""
    import rayfield as rf
    from rayfield.sgd.collective import rendezvous_address

    t = time.perf_counter()
    address = rendezvous_address()
    task = rf.remote(num_gpus=0.5)(_allreduce)
    refs = [task.remote(address, r, 2, "nccl") for r in range(2)]
    try:
        values: Any = rf.get(refs, timeout=45)
    except Exception as exc:
        values = f"{type(exc).__name__}: {str(exc)[-300:]}"
    report("nccl.two_ranks_one_gpu", None, f"two ranks on GPU 0 under nccl: {values}", t)


CHECKS = {"env": check_env, "core": check_core, "nccl": check_nccl}

if __name__ == "__main__":
    # Run through the importable modules (workers import the checks' functions by name;
    # this folder is on their path as the script's).
    import gpu_check
    import gpu_check_ml

    checks = {**gpu_check.CHECKS, **gpu_check_ml.CHECKS}
    gpu_check.guarded(sys.argv[1], checks[sys.argv[1]])
    sys.exit(1 if gpu_check.FAILED else 0)
