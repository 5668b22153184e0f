"""GPU detection, and GPU instances named as devices of the node's CUDA_VISIBLE_DEVICES (no
processes)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rayfield._private.common.devices import detect_gpus
from rayfield._private.node_manager.node_main import node_resources
from rayfield._private.runtime.gpus import CudaPin, cuda_initialized, device_ids, visible_devices


def test_visible_devices_parses_the_variable() -> None:
    assert visible_devices(None) is None
    assert visible_devices("") == []
    assert visible_devices("2, 3,") == ["2", "3"]


def test_instances_are_devices_when_the_node_lists_none() -> None:
    assert device_ids([(1, 0.5)], None) == ([(1, 0.5)], "1")
    assert device_ids([], None) == ([], "")


def test_instances_map_to_the_nodes_list() -> None:
    assert device_ids([(0, 1.0), (1, 1.0)], ["2", "3"]) == ([(2, 1.0), (3, 1.0)], "2,3")
    # Device UUIDs stay strings; an instance past the list (more GPUs declared) stays as is.
    uuid = "GPU-8f6c0a1e"
    assert device_ids([(0, 0.5)], [uuid]) == ([(uuid, 0.5)], uuid)
    assert device_ids([(2, 1.0)], ["4"]) == ([(2, 1.0)], "2")


class FakeCuda:
    """The driver initialised from a given call on (a task that used CUDA)."""

    def __init__(self, from_call: int) -> None:
        self.calls, self.from_call = 0, from_call

    def __call__(self) -> bool:
        self.calls += 1
        return self.calls >= self.from_call


def never() -> bool:
    return False


def test_a_gpu_task_that_initialised_cuda_pins_the_nodes_only_gpu() -> None:
    pin = CudaPin(node_gpus=1, initialized=FakeCuda(from_call=2), torch_count=lambda: None)
    assert not pin.must_exit("0")  # CUDA untouched yet: nothing pinned
    assert not pin.must_exit("0")  # pinned to the one GPU every later GPU task gets
    assert not pin.must_exit("")  # a CPU task after it stays (isolation is not enforced)
    assert pin.pinned == "0"


def test_a_cpu_task_that_left_torch_blind_ends_its_worker() -> None:
    # torch counted 0 devices under CUDA_VISIBLE_DEVICES="" and keeps that count.
    pin = CudaPin(node_gpus=1, initialized=never, torch_count=lambda: 0)
    assert pin.must_exit("")
    assert pin.pinned == ""


def test_a_cpu_task_with_torch_that_sees_the_gpu_keeps_its_worker() -> None:
    pin = CudaPin(node_gpus=1, initialized=never, torch_count=lambda: 1)
    assert not pin.must_exit("")
    assert pin.pinned


def test_without_torch_a_cpu_task_pins_nothing() -> None:
    pin = CudaPin(node_gpus=1, initialized=never, torch_count=lambda: None)
    assert not pin.must_exit("")
    assert pin.pinned is None


def test_on_a_node_of_several_gpus_a_pinned_worker_exits() -> None:
    assert CudaPin(node_gpus=2, initialized=FakeCuda(1), torch_count=never).must_exit("1")
    assert CudaPin(node_gpus=2, initialized=never, torch_count=lambda: 2).must_exit("")


def test_nodes_without_gpus_never_probe() -> None:
    probe = FakeCuda(from_call=1)
    counted = []
    pin = CudaPin(node_gpus=0, initialized=probe, torch_count=lambda: counted.append(1) or 0)
    assert not pin.must_exit("")
    assert probe.calls == 0 and not counted


def test_cuda_initialized_is_false_in_a_process_that_never_used_cuda() -> None:
    assert not cuda_initialized()


def test_detect_gpus_reads_cuda_visible_devices_first(tmp_path: Path) -> None:
    driver = tmp_path / "gpus"
    for bus in ("0000:01:00.0", "0000:02:00.0", "0000:03:00.0"):
        (driver / bus).mkdir(parents=True)
    assert detect_gpus({}, driver) == 3  # every GPU the driver lists
    assert detect_gpus({"CUDA_VISIBLE_DEVICES": "1,2"}, driver) == 2
    assert detect_gpus({"CUDA_VISIBLE_DEVICES": ""}, driver) == 0
    assert detect_gpus({}, tmp_path / "no-driver") == 0


def test_a_started_node_counts_its_gpus_unless_told(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    assert node_resources(2, None, {})["GPU"] == 2.0  # `rayfield start` without --num-gpus
    assert "GPU" not in node_resources(2, 0, {})  # --num-gpus 0
    assert node_resources(None, 0.5, {"tpu": 1}) == {
        "CPU": float(os.cpu_count() or 1),
        "GPU": 0.5,
        "tpu": 1.0,
    }
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert "GPU" not in node_resources(2, None, {})
