"""The experiment's state on disk: ``experiment_state.json``, written atomically.

It holds every trial (config, status, last result, disk checkpoints, failures) and the
search algorithm's position, so ``resume=True`` (or ``Tuner.restore``) continues a killed
experiment: finished trials stay finished, the others restart from their last disk
checkpoint, and no new trial repeats one already made.

Finished trials never change again, so each is written once, as one JSON line appended
to ``finished_trials.jsonl``; ``experiment_state.json`` holds the unfinished trials and
``"finished": {"file": ..., "bytes": N}``, the length of that file's prefix it counts
(bytes a killed driver appended after its last state are cut off by the next append).
A save thus costs the unfinished trials, not the whole history, and the driver keeps no
encoded copy of finished trials. :func:`load_state` returns both parts merged, finished
trials first.

The experiment directory is mode 0700 and both files 0600; they are read only when they
are this user's alone (:mod:`rayfield.util.private_files`). A trial's config is kept as
JSON; ``"config_pickled": true`` says that JSON could not hold it exactly, and its Python
objects are in the trial's ``params.pkl`` (read only when trusted, see
:func:`rayfield.tune.logger.saved_config`).
"""

from __future__ import annotations

import json
import math
import os
from typing import Any

from rayfield.tune.pickles import json_exact
from rayfield.tune.trial import Resources, Trial, TrialCheckpoint
from rayfield.util import private_files

__all__ = [
    "FINISHED_FILE",
    "STATE_FILE",
    "append_finished",
    "encode_state",
    "load_state",
    "rebase_trial",
    "trial_from_json",
    "trial_to_json",
    "write_state",
    "write_state_text",
]

STATE_FILE = "experiment_state.json"
FINISHED_FILE = "finished_trials.jsonl"


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if hasattr(value, "item"):  # numpy scalars
        try:
            return _jsonable(value.item())
        except Exception:
            pass
    return repr(value)


def trial_to_json(trial: Trial) -> dict[str, Any]:
    """A trial as plain JSON data (memory checkpoints are left out)."""
    disk = [c for c in trial.disk_checkpoints if isinstance(c.value, str)]
    current = (
        trial.checkpoint
        if trial.checkpoint is not None and trial.checkpoint.storage == "disk"
        else None
    )
    return {
        "trial_id": trial.trial_id,
        "trainable_name": trial.trainable_name,
        "config": _jsonable(trial.config),
        # numpy numbers come back as the equal Python numbers: close enough to rerun.
        "config_pickled": not json_exact(trial.config, numpy_scalars=True),
        "experiment_tag": trial.experiment_tag,
        "local_dir": trial.local_dir,
        "logdir": trial.logdir,
        "custom_trial_name": trial.custom_trial_name,
        "resources": _jsonable(trial.resources.__dict__),
        "stopping_criterion": _jsonable(trial.stopping_criterion),
        "checkpoint_freq": trial.checkpoint_freq,
        "checkpoint_at_end": trial.checkpoint_at_end,
        "keep_checkpoints_num": trial.keep_checkpoints_num,
        "checkpoint_score_attr": trial.checkpoint_score_attr,
        "max_failures": trial.max_failures,
        "export_formats": trial.export_formats,
        "status": trial.status,
        "last_result": _jsonable(trial.last_result),
        "last_update_time": trial.last_update_time,
        "num_failures": trial.num_failures,
        "error_msg": trial.error_msg,
        "error_file": trial.error_file,
        "evaluated_params": _jsonable(trial.evaluated_params),
        "checkpoints": [{"path": c.value, "result": _jsonable(c.result)} for c in disk],
        "checkpoint": current.value if current else None,
    }


def rebase_trial(data: dict[str, Any], experiment_dir: str) -> dict[str, Any]:
    """``data`` (from :func:`trial_to_json`) with its paths moved under ``experiment_dir``.

    An experiment restored into another directory than the one it ran in (a cloud copy
    downloaded elsewhere) keeps its trial directories, checkpoints and error files, but
    the saved state names them under the old directory: every path under the old
    ``local_dir`` is rewritten under ``experiment_dir``; other paths are kept.
    """
    old = os.path.normpath(data["local_dir"]) if data.get("local_dir") else None
    new = os.path.normpath(experiment_dir)
    if old is None or old == new:
        return data

    def move(path: Any) -> Any:
        if not isinstance(path, str) or not path:
            return path
        norm = os.path.normpath(path)
        if norm == old or norm.startswith(old + os.sep):
            return new + norm[len(old) :]
        return path

    out = dict(data, local_dir=new, logdir=move(data["logdir"]))
    out["error_file"] = move(data.get("error_file"))
    out["checkpoint"] = move(data.get("checkpoint"))
    out["checkpoints"] = [dict(c, path=move(c["path"])) for c in data.get("checkpoints", [])]
    return out


def trial_from_json(data: dict[str, Any], config: dict[str, Any] | None = None) -> Trial:
    """The trial saved by :func:`trial_to_json`; a RUNNING or PAUSED one becomes PENDING.

    Args:
        config: the trial's config with its original Python objects, when known (the
            JSON copy turns non-JSON values into strings).
    """
    res = data["resources"]
    resources = Resources(
        cpu=res["cpu"],
        gpu=res["gpu"],
        extra_cpu=res["extra_cpu"],
        extra_gpu=res["extra_gpu"],
        custom_resources=tuple((str(n), float(a)) for n, a in res["custom_resources"]),
        extra_custom_resources=tuple((str(n), float(a)) for n, a in res["extra_custom_resources"]),
        bundles=tuple(tuple((str(n), float(a)) for n, a in b) for b in res.get("bundles", ())),
        strategy=str(res.get("strategy", "PACK")),
    )
    trial = Trial(
        data["trainable_name"],
        config=config if config is not None else data["config"],
        trial_id=data["trial_id"],
        experiment_tag=data["experiment_tag"],
        local_dir=data["local_dir"],
        resources=resources,
        stopping_criterion=data["stopping_criterion"],
        checkpoint_freq=data["checkpoint_freq"],
        checkpoint_at_end=data["checkpoint_at_end"],
        keep_checkpoints_num=data["keep_checkpoints_num"],
        checkpoint_score_attr=data["checkpoint_score_attr"],
        max_failures=data["max_failures"],
        evaluated_params=data.get("evaluated_params"),
        export_formats=data.get("export_formats"),
    )
    trial.logdir = data["logdir"]
    trial.custom_trial_name = data.get("custom_trial_name")
    status = data["status"]
    trial.status = Trial.PENDING if status in (Trial.RUNNING, Trial.PAUSED) else status
    trial.last_result = data["last_result"]
    trial.last_update_time = data["last_update_time"]
    trial.num_failures = data["num_failures"]
    trial.error_msg = data["error_msg"]
    trial.error_file = data["error_file"]
    trial.disk_checkpoints = [
        TrialCheckpoint("disk", c["path"], c["result"])
        for c in data["checkpoints"]
        if os.path.isdir(c["path"])
    ]
    if data.get("checkpoint") and os.path.isdir(data["checkpoint"]):
        trial.checkpoint = next(
            (c for c in trial.disk_checkpoints if c.value == data["checkpoint"]),
            TrialCheckpoint("disk", data["checkpoint"], {}),
        )
    return trial


def encode_state(state: Any) -> str:
    """``state`` as JSON text (NaN and infinities as null, numpy scalars as numbers)."""
    try:  # the common case: plain JSON values, encoded by the C encoder
        return json.dumps(state, allow_nan=False)
    except (TypeError, ValueError):
        return json.dumps(_jsonable(state))


def write_state(experiment_dir: str, state: dict[str, Any]) -> str:
    """Write ``state`` to ``<experiment_dir>/experiment_state.json`` atomically."""
    return write_state_text(experiment_dir, encode_state(state))


def write_state_text(experiment_dir: str, text: str) -> str:
    """Write the encoded state ``text`` to ``<experiment_dir>/experiment_state.json``.

    The JSON goes to a temporary file (mode 0600) in the same directory, is flushed to
    disk, then renamed over the old file: a reader (or a resume after a kill) sees the old
    or the new state, never a partial one.

    Raises:
        UnsafeFileError: the directory (made mode 0700) is not this user's alone.
    """
    private_files.ensure_private_dir(experiment_dir)
    target = os.path.join(experiment_dir, STATE_FILE)
    with private_files.atomic_write(target) as f:
        f.write(text.encode("utf-8"))
        f.flush()
        os.fsync(f.fileno())
    return target


def append_finished(experiment_dir: str, lines: bytes, offset: int) -> None:
    """Append encoded finished trials (one JSON object per line) to ``FINISHED_FILE``.

    The file is first cut to ``offset`` bytes, the length the last saved state counts:
    lines a killed driver wrote after that state are dropped (their trials are still
    unfinished in it). The data is flushed to disk before this returns, so a state
    written afterwards never counts bytes that are not there.

    Raises:
        UnsafeFileError: the directory or the file is not this user's alone.
    """
    private_files.ensure_private_dir(experiment_dir)
    with private_files.open_private(os.path.join(experiment_dir, FINISHED_FILE), "ab") as f:
        if f.tell() != offset:
            f.truncate(offset)
            f.seek(offset)
        if lines:
            f.write(lines)
        f.flush()
        os.fsync(f.fileno())


def load_state(experiment_dir: str) -> dict[str, Any] | None:
    """The state written by :func:`write_state`, or None when there is none.

    The finished trials of ``FINISHED_FILE`` come first in ``"trials"``; then
    ``state["finished"]["count"]`` says how many there are.

    Raises:
        TuneError: the state counts more finished-trial bytes than the file has, or is
            not an experiment state.
        UnsafeFileError: a file (or a directory above) is not this user's alone.
    """
    path = os.path.join(experiment_dir, STATE_FILE)
    if not os.path.lexists(path):
        return None
    data: dict[str, Any] = private_files.read_json(path)
    if not isinstance(data, dict) or not isinstance(data.get("trials"), list):
        from rayfield.tune.error import TuneError

        raise TuneError(f"{path} is not an experiment state (no list of trials)")
    finished = data.get("finished")
    if finished:
        size = int(finished["bytes"])
        with private_files.open_private(os.path.join(experiment_dir, FINISHED_FILE), "rb") as f:
            raw = f.read(size)
        if len(raw) != size:
            from rayfield.tune.error import TuneError

            raise TuneError(
                f"{experiment_dir}: {finished['file']} has {len(raw)} bytes but the "
                f"experiment state counts {size}; the directory was changed or copied in part"
            )
        done = [json.loads(line) for line in raw.splitlines() if line.strip()]
        finished["count"] = len(done)
        data["trials"] = done + list(data["trials"])
    return data
