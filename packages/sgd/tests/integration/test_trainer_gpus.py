"""PyTorchTrainer's backend for replicas that hold GPUs, on a runtime that declares one GPU
(this machine has no CUDA: the replicas train on the CPU, the scheduling and the backend
choice are what is checked; tools/gpu_check.sh runs the same on a real GPU)."""

from __future__ import annotations

from typing import Any

import pytest
from sgd_testing import line_data, linear_model

from rayfield.sgd import PyTorchTrainer, Resources

pytestmark = pytest.mark.rayfield_runtime(num_cpus=2, num_gpus=1)

HALF_GPU = Resources(num_cpus=1, num_gpus=0.5)


def test_nccl_refuses_replicas_that_share_a_gpu(cluster: Any) -> None:
    # NCCL puts one rank on one device: two half-GPU replicas land on GPU 0 together.
    with pytest.raises(ValueError, match=r"replicas 0 and 1 share GPU 0 .*backend=\"gloo\""):
        PyTorchTrainer(
            linear_model,
            line_data,
            num_replicas=2,
            resources_per_replica=HALF_GPU,
            backend="nccl",
        )


def test_auto_backend_is_gloo_for_shared_gpus(cluster: Any) -> None:
    trainer = PyTorchTrainer(
        linear_model,
        line_data,
        config={"lr": 0.1},
        num_replicas=2,
        resources_per_replica=HALF_GPU,
        batch_size=32,
    )
    try:  # constructed: the two replicas, both on GPU 0, formed a gloo group
        assert trainer.backend == "gloo" and len(trainer.workers) == 2
    finally:
        trainer.shutdown()
