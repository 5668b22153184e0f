"""sync_to_driver without a cluster: what is packed and written, when copies are due,
and the choices."""

from __future__ import annotations

import math
import os

import pytest

from rayfield import tune
from rayfield.tune.driver_sync import DriverSync, merge_files, pack_changed
from rayfield.tune.syncer import CommandSyncer, FunctionSyncer


def test_merge_writes_only_missing_files(tmp_path):
    (tmp_path / "result.json").write_bytes(b'{"i": 1}\n{"i": 2}\n')  # the driver's, newer
    files = {"result.json": b'{"i": 1}\n', "plots/loss.svg": b"<svg/>", "a.txt": b"a"}
    assert merge_files(files, str(tmp_path)) == ["a.txt", "plots/loss.svg"]
    assert (tmp_path / "result.json").read_bytes() == b'{"i": 1}\n{"i": 2}\n'  # kept
    assert (tmp_path / "plots" / "loss.svg").read_bytes() == b"<svg/>"
    assert merge_files(files, str(tmp_path)) == []
    with pytest.raises(ValueError, match="outside"):
        merge_files({"../escape.txt": b"x"}, str(tmp_path / "plots"))


def test_choices():
    assert DriverSync(False).wanted() is False  # no cluster call at all
    assert DriverSync(None).syncer is None and DriverSync(True).with_files
    assert isinstance(DriverSync("rsync -a {source}/ {target}").syncer, CommandSyncer)
    assert isinstance(DriverSync(lambda s, t: None).syncer, FunctionSyncer)
    with pytest.raises(tune.TuneError, match="sync_to_driver must be"):
        DriverSync(3)


def test_apply_runs_the_function_with_the_remote_source(tmp_path):
    calls = []
    sync = DriverSync(lambda source, target: calls.append((source, target)))
    report = {"node_id": "n2", "node_ip": "10.0.0.2", "logdir": "/r/exp/t1"}
    assert sync.apply(str(tmp_path), report) == []
    assert calls == [("10.0.0.2:/r/exp/t1", str(tmp_path))]
    assert sync.apply(str(tmp_path), None) == [] and len(calls) == 1  # the driver's node


def test_merge_replaces_only_what_an_earlier_copy_wrote(tmp_path):
    (tmp_path / "result.json").write_bytes(b"driver's")
    sync = DriverSync()
    report = {"node_id": "n2", "node_ip": "10.0.0.2", "logdir": "/r/t1"}
    first = {**report, "files": {"plot.svg": b"v1", "result.json": b"old"}}
    assert sync.apply(str(tmp_path), first, "t1", final=False) == ["plot.svg"]
    second = {**report, "files": {"plot.svg": b"v2", "result.json": b"older"}}
    assert sync.apply(str(tmp_path), second, "t1", final=False) == ["plot.svg"]
    assert (tmp_path / "plot.svg").read_bytes() == b"v2"
    assert (tmp_path / "result.json").read_bytes() == b"driver's"  # never replaced
    last = {**report, "files": {"plot.svg": b"v3"}}
    assert sync.apply(str(tmp_path), last, "t1", final=True) == ["plot.svg"]
    # After the final copy the directory is forgotten: nothing in it is replaceable.
    assert sync.apply(str(tmp_path), {**report, "files": {"plot.svg": b"v4"}}, "t1") == []
    assert (tmp_path / "plot.svg").read_bytes() == b"v3"


def test_pack_changed_sends_new_and_changed_files_once(tmp_path):
    (tmp_path / "a.txt").write_text("a")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.txt").write_text("b")
    (tmp_path / "checkpoint_000001").mkdir()
    (tmp_path / "checkpoint_000001" / "model.pt").write_text("weights")
    sent: dict[str, tuple[int, int]] = {}
    assert pack_changed(str(tmp_path), sent) == {"a.txt": b"a", "sub/b.txt": b"b"}
    assert pack_changed(str(tmp_path), sent) == {}
    (tmp_path / "a.txt").write_text("a, longer")
    (tmp_path / "c.txt").write_text("c")
    assert pack_changed(str(tmp_path), sent) == {"a.txt": b"a, longer", "c.txt": b"c"}
    os.utime(tmp_path / "sub" / "b.txt", ns=(0, 1))  # same size, other mtime
    assert pack_changed(str(tmp_path), sent) == {"sub/b.txt": b"b"}
    assert pack_changed(str(tmp_path / "missing"), {}) == {}


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_running_trial_is_copied_every_period_and_after_a_checkpoint():
    clock = Clock()
    sync = DriverSync(period_s=10.0, clock=clock)
    assert not sync.due("t1")  # not started
    sync.on_trial_start("t1")
    clock.now += 9.9
    assert not sync.due("t1")
    clock.now += 0.1
    assert sync.due("t1")
    sync.asked("t1")
    assert not sync.due("t1")
    clock.now += 1.0
    sync.on_checkpoint("t1")
    assert sync.due("t1")  # at once after a checkpoint
    sync.asked("t1")
    assert not sync.due("t1")
    clock.now += 10.0
    assert sync.due("t1")
    sync.on_trial_end("t1")
    assert not sync.due("t1")


def test_pacing_options():
    clock = Clock()
    only_checkpoints = DriverSync(period_s=math.inf, clock=clock)
    only_checkpoints.on_trial_start("t1")
    clock.now += 1e9
    assert not only_checkpoints.due("t1")
    only_checkpoints.on_checkpoint("t1")
    assert only_checkpoints.due("t1")
    no_checkpoints = DriverSync(period_s=10.0, on_checkpoint=False, clock=clock)
    no_checkpoints.on_trial_start("t1")
    no_checkpoints.on_checkpoint("t1")
    assert not no_checkpoints.due("t1")
    off = DriverSync(False, period_s=0.0, clock=clock)
    off.on_trial_start("t1")
    off.on_checkpoint("t1")
    assert not off.due("t1")
    with pytest.raises(tune.TuneError, match="period must be >= 0"):
        DriverSync(period_s=-1.0)


def test_a_trial_on_the_drivers_node_is_not_asked_again():
    sync = DriverSync(period_s=0.0, clock=Clock())
    sync.on_trial_start("t1")
    assert sync.due("t1")
    sync.asked("t1")
    assert sync.apply("/nowhere", None, "t1", final=False) == []  # its actor answered None
    assert not sync.due("t1")
    sync.on_trial_start("t1")  # restarted, maybe on another node
    assert sync.due("t1")
