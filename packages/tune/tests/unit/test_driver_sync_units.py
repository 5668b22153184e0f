"""sync_to_driver's driver side without a cluster: what is written, and the choices."""

from __future__ import annotations

import pytest

from rayfield import tune
from rayfield.tune.driver_sync import DriverSync, merge_files
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
