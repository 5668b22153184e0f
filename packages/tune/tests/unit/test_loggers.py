"""The per-trial loggers: JSON, CSV (also after a resume) and TensorBoard files."""

from __future__ import annotations

import csv
import json
import os
import pickle
import stat
import struct

from rayfield.tune.logger import DEFAULT_LOGGERS, LoggerCallback, pretty_print
from rayfield.tune.trial import Trial


def test_logger_callback_writes_every_file(tmp_path):
    trial = Trial("f", {"lr": 0.1, "nested": {"a": 1}}, local_dir=str(tmp_path))
    cb = LoggerCallback(DEFAULT_LOGGERS)
    cb.on_trial_start(trial)
    for i in (1, 2):
        cb.on_trial_result(
            trial,
            {
                "training_iteration": i,
                "loss": float("nan") if i == 2 else 0.5,
                "info": {"x": i},
                "config": trial.config,
            },
        )
    cb.on_trial_error(trial, "Traceback: boom")
    cb.on_trial_complete(trial)
    files = set(os.listdir(trial.logdir))
    assert {"params.json", "result.json", "progress.csv", "error_0.txt"} <= files
    assert "params.pkl" not in files  # params.json holds this config exactly
    assert any(f.startswith("events.out.tfevents") for f in files)  # tensorboardX
    assert stat.S_IMODE(os.stat(trial.logdir).st_mode) == 0o700
    for name in files:  # every file Tune keeps is its user's alone
        assert stat.S_IMODE(os.stat(os.path.join(trial.logdir, name)).st_mode) == 0o600, name
    with open(os.path.join(trial.logdir, "params.json")) as f:
        assert json.load(f) == {"lr": 0.1, "nested": {"a": 1}}
    with open(os.path.join(trial.logdir, "result.json")) as f:
        lines = [json.loads(line) for line in f]
    assert [r["loss"] for r in lines] == [0.5, None]
    with open(os.path.join(trial.logdir, "progress.csv")) as f:
        rows = list(csv.DictReader(f))
    assert [r["info/x"] for r in rows] == ["1", "2"] and "config" not in rows[0]
    assert trial.error_file.endswith("error_0.txt")

    # After a resume the CSV goes on under the same header.
    cb = LoggerCallback(DEFAULT_LOGGERS)
    cb.on_trial_start(trial)
    cb.on_trial_result(trial, {"training_iteration": 3, "loss": 0.1, "info": {"x": 3}})
    cb.on_trial_result(trial, {"training_iteration": 4, "new": 1})  # a column less, one more
    cb.on_experiment_end([trial])
    with open(os.path.join(trial.logdir, "progress.csv")) as f:
        rows = list(csv.DictReader(f))
    assert [r["training_iteration"] for r in rows] == ["1", "2", "3", "4"]
    assert rows[3]["loss"] == "" and "new" not in rows[3]


def _scalars(logdir: str, tag: str) -> list[tuple[int, float]]:
    """(step, value) of ``tag`` in the TFRecord event files of ``logdir``."""
    return [(step, round(value, 3)) for t, step, value in _all_scalars(logdir) if t == tag]


def test_tensorboard_scalars_are_readable(tmp_path):
    trial = Trial("f", {}, local_dir=str(tmp_path))
    cb = LoggerCallback(DEFAULT_LOGGERS)
    cb.on_trial_start(trial)
    for i in (1, 2, 3):
        result = {"training_iteration": i, "mean_accuracy": i / 10, "config": {"lr": 0.5}}
        cb.on_trial_result(trial, {**result, "info": {"loss": i}})
    cb.on_experiment_end([trial])
    assert _scalars(trial.logdir, "ray/tune/mean_accuracy") == [(1, 0.1), (2, 0.2), (3, 0.3)]
    assert _scalars(trial.logdir, "ray/tune/info/loss") == [(1, 1.0), (2, 2.0), (3, 3.0)]
    assert _scalars(trial.logdir, "ray/tune/config/lr") == []  # the config is no scalar


def test_pretty_print_leaves_out_config_and_none():
    text = pretty_print({"a": 1, "config": {"x": 1}, "b": None, "c": {"d": 2}})
    assert text == "a: 1\nc:\n  d: 2\n"


def test_status_printer_redraws_on_a_terminal_and_appends_otherwise():
    import io

    from rayfield.tune.progress import StatusPrinter, status_html, status_string

    trials = [Trial("f", {"a": i}, experiment_tag=str(i)) for i in range(3)]
    text = status_string(trials, "Using FIFO scheduling algorithm.", "0/2 CPUs", "/tmp/x")
    assert "Number of trials: 3 ({'PENDING': 3})" in text

    class Tty(io.StringIO):
        def isatty(self):
            return True

    tty = Tty()
    printer = StatusPrinter(tty)
    printer.show(text, trials)
    printer.show(text, trials)
    lines = text.count("\n") + 1
    assert tty.getvalue().count(f"\x1b[{lines}F\x1b[J") == 1  # the second block replaced the first
    plain = io.StringIO()
    printer = StatusPrinter(plain)
    printer.show(text, trials)
    printer.show(text, trials)
    assert "\x1b[" not in plain.getvalue() and plain.getvalue().count("== Status ==") == 2
    html = status_html(trials, "== Status ==")
    assert html.count("<tr>") == 4 and "f_0" in html


def test_the_notebook_check_imports_nothing(monkeypatch):
    import sys
    import types

    from rayfield.tune.progress import _in_notebook

    monkeypatch.delitem(sys.modules, "IPython", raising=False)
    assert not _in_notebook() and "IPython" not in sys.modules  # not imported by the check

    class ZMQInteractiveShell:
        pass

    fake = types.ModuleType("IPython")
    fake.get_ipython = lambda: ZMQInteractiveShell()  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "IPython", fake)
    assert _in_notebook()  # a Jupyter kernel
    fake.get_ipython = lambda: None  # type: ignore[attr-defined]
    assert not _in_notebook()  # IPython imported, but no shell running


def _masked_crc(data):
    """TFRecord's masked CRC-32C, as tensorboardX computes it."""
    from tensorboardX.crc32c import crc32c

    crc = crc32c(data)
    return struct.pack("<I", (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF)


def test_event_records_match_tensorboardx_encoding():
    """The records rayfield encodes itself are the bytes tensorboardX would write."""
    from tensorboardX.crc32c import crc32c as tbx_crc32c
    from tensorboardX.proto.event_pb2 import Event
    from tensorboardX.proto.summary_pb2 import Summary

    from rayfield.tune import tbx

    for data in (b"", b"a", b"123456789", bytes(range(256)) * 3):
        assert tbx.crc32c(data) == tbx_crc32c(data)
    assert tbx.crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value
    values = [("ray/tune/loss", 0.25), ("ray/tune/n", 3e9)]
    summary = Summary(value=[Summary.Value(tag=t, simple_value=v) for t, v in values])
    for step in (0, 1, 300, 2**40):
        ours = tbx.encode_event(1700000000.5, step, values)
        assert ours == Event(wall_time=1700000000.5, step=step, summary=summary).SerializeToString()
        encoded = b"".join(tbx.scalar_prefix(t) + struct.pack("<f", v) for t, v in values)
        assert tbx.encode_event(1700000000.5, step, values=encoded) == ours
        framed = tbx.record(ours)  # length, its masked CRC, the data, its masked CRC
        assert framed[:8] == struct.pack("<Q", len(ours)) and framed[12:-4] == ours
        assert framed[8:12] == _masked_crc(framed[:8]) and framed[-4:] == _masked_crc(ours)
        assert tbx.scalars_record(1700000000.5, step, encoded) == framed  # the fused form
    header = tbx.encode_event(12.0, file_version="brain.Event:2")
    assert header == Event(wall_time=12.0, file_version="brain.Event:2").SerializeToString()


def test_the_driver_writes_event_files_without_importing_tensorboardx(tmp_path):
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from rayfield.tune.logger import DEFAULT_LOGGERS, LoggerCallback\n"
        "from rayfield.tune.trial import Trial\n"
        f"trial = Trial('f', {{}}, local_dir={str(tmp_path)!r})\n"
        "cb = LoggerCallback(DEFAULT_LOGGERS)\n"
        "cb.on_trial_start(trial)\n"
        "cb.on_trial_result(trial, {'training_iteration': 1, 'loss': 0.5})\n"
        "cb.on_experiment_end([trial])\n"
        "print(trial.logdir)\n"
        "print(sorted(m for m in ('tensorboardX', 'torch') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    logdir, imported = out.stdout.splitlines()
    assert imported == "[]"
    assert _scalars(logdir, "ray/tune/loss") == [(1, 0.5)]


class _Now:
    """A writer that runs each operation at once (the order a writer thread keeps)."""

    def submit(self, op):
        op()


def _trial_files(logdir: str) -> dict[str, object]:
    """The files of a trial directory: their bytes, and as ``"events"`` the scalars of
    the event files (their wall times differ from run to run)."""
    out: dict[str, object] = {}
    for name in sorted(os.listdir(logdir)):
        if name.startswith("events.out.tfevents"):
            out["events"] = _all_scalars(logdir)
        else:
            with open(os.path.join(logdir, name), "rb") as f:
                out[name] = f.read()
    return out


def _all_scalars(logdir: str) -> list[tuple[str, int, float]]:
    """(tag, step, value) of every scalar in the TFRecord event files of ``logdir``."""
    from tensorboardX.proto.event_pb2 import Event

    out = []
    for name in sorted(os.listdir(logdir)):
        if name.startswith("events.out.tfevents"):
            with open(os.path.join(logdir, name), "rb") as f:
                data = f.read()
            pos = 0
            while pos < len(data):
                (length,) = struct.unpack("<Q", data[pos : pos + 8])
                event = Event.FromString(data[pos + 12 : pos + 12 + length])
                pos += 12 + length + 4
                out += [(v.tag, event.step, v.simple_value) for v in event.summary.value]
    return out


def test_batched_results_write_the_same_files_as_one_by_one(tmp_path):
    """With a writer the results reach the loggers in batches (at flush points): the files
    hold the same bytes as when each result is written at once (events: the same scalars)."""
    import numpy as np

    results = [
        {"training_iteration": 1, "loss": 0.5, "n": 3, "config": {"lr": 0.1}, "s": "a,b"},
        {"training_iteration": 2, "loss": float("nan"), "n": 4, "config": {"lr": 0.1}},
        {"training_iteration": 3, "loss": np.float64(0.25), "n": np.int64(5), "flag": True},
        {"training_iteration": 4, "loss": float("inf"), "info": {"x": 1, "y": [1, 2]}},
        {"training_iteration": 5, "loss": 0.125, "n": None, "t": (1, 2), "new": object()},
        {"training_iteration": 6, "loss": 0.5, "n": 3, "config": {"lr": 0.1}, "s": "a,b"},
    ]
    trees = []
    for writer, name in ((None, "direct"), (_Now(), "batched")):
        trial = Trial("f", {"lr": 0.1}, local_dir=str(tmp_path / name))
        cb = LoggerCallback(DEFAULT_LOGGERS, writer=writer)
        cb.on_trial_start(trial)
        for result in results[:3]:
            cb.on_trial_result(trial, result)
        cb.on_checkpoint()  # a flush point: the first three are on disk now
        with open(os.path.join(trial.logdir, "result.json")) as f:
            assert [json.loads(line)["training_iteration"] for line in f] == [1, 2, 3]
        for result in results[3:]:
            cb.on_trial_result(trial, result)
        cb.on_trial_complete(trial)
        trees.append(_trial_files(trial.logdir))
    direct, batched = trees
    assert batched == direct
    assert set(direct) == {"params.json", "result.json", "progress.csv", "events"}
    lines = direct["result.json"].decode().splitlines()
    assert [json.loads(line)["loss"] for line in lines] == [0.5, None, 0.25, None, 0.125, 0.5]
    rows = list(csv.DictReader(direct["progress.csv"].decode().splitlines()))
    assert [r["loss"] for r in rows] == ["0.5", "", "0.25", "", "0.125", "0.5"]
    losses = [(step, value) for tag, step, value in direct["events"] if tag == "ray/tune/loss"]
    assert losses == [(1, 0.5), (3, 0.25), (5, 0.125), (6, 0.5)]
    assert not any(tag == "ray/tune/flag" for tag, _, _ in direct["events"])  # a bool


def test_a_writer_gets_one_operation_per_trial_and_flush_point(tmp_path):
    ops = []

    class Counting(_Now):
        def submit(self, op):
            ops.append(op)
            op()

    trial = Trial("f", {"lr": 0.1}, local_dir=str(tmp_path))
    cb = LoggerCallback(DEFAULT_LOGGERS, flush_interval_s=3600, writer=Counting())
    cb.on_trial_start(trial)
    assert len(ops) == 1 and os.path.exists(os.path.join(trial.logdir, "params.json"))
    for i in range(50):
        cb.on_trial_result(trial, {"training_iteration": i + 1, "loss": 1.0 / (i + 1)})
    assert len(ops) == 1  # held until a flush point
    cb.on_trial_complete(trial)  # the 50 results, then the close
    assert len(ops) == 3
    with open(os.path.join(trial.logdir, "progress.csv")) as f:
        assert len(list(csv.DictReader(f))) == 50


def test_trial_directories_after_the_first_are_checked_with_one_stat(tmp_path):
    """In a parent checked once, a new trial directory is made 0700, one the trial's actor
    made first is made 0700, and anything else (a symlink) still gets the whole check."""
    import pytest

    from rayfield.util.private_files import UnsafeFileError

    cb = LoggerCallback(DEFAULT_LOGGERS)
    first, made, actor = (Trial("f", {}, local_dir=str(tmp_path)) for _ in range(3))
    cb.on_trial_start(first)  # the whole check: the parent is remembered
    os.mkdir(actor.logdir, 0o755)  # as the trial's actor does before the driver
    for trial in (made, actor):
        cb.on_trial_start(trial)
        assert stat.S_IMODE(os.lstat(trial.logdir).st_mode) == 0o700
        assert os.path.exists(os.path.join(trial.logdir, "params.json"))
    elsewhere = tmp_path.parent / f"{tmp_path.name}-other"
    elsewhere.mkdir(mode=0o777)
    os.chmod(elsewhere, 0o777)  # others may write it: refused
    linked = Trial("f", {}, local_dir=str(tmp_path))
    os.symlink(elsewhere, linked.logdir)
    with pytest.raises(UnsafeFileError):
        cb._make_dir(linked.logdir)
    cb.on_experiment_end([first, made, actor])


def test_params_pkl_is_written_only_for_a_config_json_cannot_hold(tmp_path):
    """A tuple needs the pickle; once a config change makes the config plain JSON, the
    stale pickle goes."""
    trial = Trial("f", {"shape": (1, 2)}, local_dir=str(tmp_path))
    cb = LoggerCallback(DEFAULT_LOGGERS)
    cb.on_trial_start(trial)
    pkl = os.path.join(trial.logdir, "params.pkl")
    with open(pkl, "rb") as f:
        assert pickle.load(f) == {"shape": (1, 2)}
    trial.config = {"shape": [1, 2]}
    cb.on_trial_reset(trial)
    assert not os.path.exists(pkl)
    with open(os.path.join(trial.logdir, "params.json")) as f:
        assert json.load(f) == {"shape": [1, 2]}
    cb.on_trial_complete(trial)


def test_result_lines_with_a_long_shared_config_are_the_lines_one_by_one():
    """A long config shared by a batch's results is encoded once and spliced into each
    line: the lines are those of each result encoded alone, also when another value holds
    the config's stand-in or the batch needs the lenient encoding (NaN)."""
    from rayfield.tune.logger_encoding import _MARK, _SPLICE_MIN_CHARS, _json_line, json_lines

    config = {f"p{i}": (i / 7 if i % 2 else f"choice {i}") for i in range(20)}
    config["nested"] = {"list": [1, 2.5, None], "s": 'a"b'}
    assert len(json.dumps(config)) >= _SPLICE_MIN_CHARS
    batches = [
        [{"training_iteration": i, "loss": 1 / (i + 1), "config": config} for i in range(5)],
        [{"s": _MARK, "config": config, "t": _MARK}, {"config": config, "after": _MARK}],
        [{"config": config, "loss": float("nan")}, {"config": config, "n": 1}],
        [{"config": {"short": 1}}, {"config": dict(config)}, {"config": config}, {"no": 1}],
    ]
    for results in batches:
        assert json_lines(results) == "".join(_json_line(r) + "\n" for r in results)
    for line in json_lines(batches[0]).splitlines():
        assert json.loads(line)["config"] == config


def test_tensorboard_values_beyond_float32_are_written_as_infinities(tmp_path):
    """As numpy's float32 (and so tensorboardX) gives them, instead of an error that lost
    the batch; the second result of the same shape takes the per-shape fast path."""
    trial = Trial("f", {}, local_dir=str(tmp_path))
    cb = LoggerCallback(DEFAULT_LOGGERS)
    cb.on_trial_start(trial)
    for i in (1, 2):
        result = {"training_iteration": i, "big": 1e300, "neg": -(10**40), "huge": 2**1100}
        cb.on_trial_result(trial, {**result, "ok": 0.5})
    cb.on_experiment_end([trial])
    inf = float("inf")
    assert _scalars(trial.logdir, "ray/tune/big") == [(1, inf), (2, inf)]
    assert _scalars(trial.logdir, "ray/tune/neg") == [(1, -inf), (2, -inf)]
    assert _scalars(trial.logdir, "ray/tune/huge") == [(1, inf), (2, inf)]
    assert _scalars(trial.logdir, "ray/tune/ok") == [(1, 0.5), (2, 0.5)]
