"""GPU devices of placement group bundles on a node (``common/bundle_gpus.py``) and the
ledger that places them, without processes."""

from __future__ import annotations

from pathlib import Path

from rayfield._private.common import bundle_gpus
from rayfield._private.node_manager.bundles import BundleLedger

PG = b"\x01" * 16
OTHER = b"\x02" * 16


def test_bundles_take_free_devices_from_the_top_and_pack_fractions() -> None:
    room = bundle_gpus.capacity(4.0)
    assert room == [1.0, 1.0, 1.0, 1.0]
    assert bundle_gpus.capacity(1.5) == [1.0, 0.5]
    held = [0.0, 0.0, 0.0, 0.0]
    assert bundle_gpus.place(2.0, held, [], room) == {3: 1.0, 2: 1.0}
    held = [0.0, 0.0, 0.5, 1.0]
    assert bundle_gpus.place(0.5, held, [], room) == {2: 0.5}  # packs onto the shared one
    assert bundle_gpus.place(1.0, held, [1.0, 1.0], room) is None  # devices 0, 1: plain work
    assert bundle_gpus.place(1.0, held, [1.0], room) == {1: 1.0}
    assert bundle_gpus.place(3.0, held, [], room) is None


def test_the_plain_total_keeps_the_prefix_clear_of_bundles() -> None:
    assert bundle_gpus.plain_total(2.0, [0.0, 0.0, 1.0, 1.0]) == 2.0
    assert bundle_gpus.plain_total(2.5, [0.0, 0.0, 0.5, 1.0]) == 2.5  # device 2 shared
    # A bundle freed below another leaves a gap: device 1 is not handed out meanwhile.
    assert bundle_gpus.plain_total(3.0, [0.0, 0.0, 1.0, 0.0]) == 2.0


def test_the_device_table_and_a_tasks_instances_as_node_devices() -> None:
    table = bundle_gpus.device_table([(PG, 0, {3: 1.0}), (PG, 1, {2: 1.0, 1: 1.0}), (OTHER, 0, {})])
    pg = PG.hex()
    assert table == {
        f"GPU_group_0_{pg}": [3],
        f"GPU_group_1_{pg}": [1, 2],
        f"GPU_group_{pg}": [1, 2, 3],
    }
    ids = {"CPU": [(0, 1.0)], f"GPU_group_1_{pg}": [(1, 1.0)]}
    assert bundle_gpus.node_instances(ids, table) == [(2, 1.0)]
    assert bundle_gpus.node_instances({"GPU": [(0, 0.5)]}, table) == [(0, 0.5)]
    frac = bundle_gpus.device_table([(PG, 0, {2: 0.5}), (PG, 1, {3: 1.0})])
    assert frac[f"GPU_group_{pg}"] == [3, 2]  # the whole device first: the last is a fraction


def test_the_table_file_is_private_and_written_whole(tmp_path: Path) -> None:
    sock = str(tmp_path / "node.sock")
    assert bundle_gpus.read_table(sock) == {}
    bundle_gpus.write_table(sock, {"GPU_group_0_x": [3]})
    assert bundle_gpus.read_table(sock) == {"GPU_group_0_x": [3]}
    assert bundle_gpus.table_path(sock).stat().st_mode & 0o777 == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["node.sock.bundle_gpus.json"]


def test_a_ledger_gives_bundles_devices_and_cuts_the_plain_gpus() -> None:
    ledger = BundleLedger({"CPU": 4.0, "GPU": 4.0})
    free = {"CPU": 4.0, "GPU": 4.0}
    assert ledger.prepare(PG, {0: {"CPU": 1.0, "GPU": 1.0}, 1: {"GPU": 2.0}}, free)
    assert ledger.gpu_table() == {}  # prepared, not committed: no work runs there yet
    ledger.commit(PG, [0, 1])
    pg = PG.hex()
    assert ledger.gpu_table()[f"GPU_group_0_{pg}"] == [3]
    assert ledger.gpu_table()[f"GPU_group_1_{pg}"] == [1, 2]
    assert ledger.totals()["GPU"] == 1.0 and ledger.totals()[f"GPU_group_{pg}"] == 3.0
    # Device 0 is in plain use: a bundle of 1 more GPU finds no free device.
    assert not ledger.prepare(OTHER, {0: {"GPU": 1.0}}, {"GPU": 1.0}, gpu_used=[1.0])
    ledger.release(PG, [1])
    assert ledger.totals()["GPU"] == 3.0  # devices 0..2 plain again, 3 in bundle 0
    assert ledger.prepare(OTHER, {0: {"GPU": 1.0}}, {"GPU": 3.0}, gpu_used=[1.0, 0.0, 1.0])
    ledger.commit(OTHER, [0])
    assert ledger.gpu_table()[f"GPU_group_0_{OTHER.hex()}"] == [1]
    assert ledger.totals()["GPU"] == 1.0  # device 2's plain task keeps it until it ends
