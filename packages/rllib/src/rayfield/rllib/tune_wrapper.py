"""An rllib trainer as a ``tune.Trainable`` (`make_trainable`), for `rayfield.rllib.tune_runner`
(``rllib train`` through Tune) and `rayfield.rllib.tune_trainables` (the trainables by
name): train, save into Tune's checkpoint directory, restore, export, stop.

No file of a checkpoint directory is unpickled here: a checkpoint is restored from
rllib's own files (`checkpoint_blob`: JSON and tensors read with ``weights_only=True``,
each checked to be this user's alone), never from the pickled ``.tune_metadata`` Tune
keeps beside them. Importing this module imports neither Tune nor torch (Tune's module
is passed in).
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path
from typing import Any

__all__ = ["checkpoint_blob", "make_trainable"]


def make_trainable(
    tune: Any, algorithm: str, own_resources: bool = True, restore_from: str | None = None
) -> type:
    """A ``tune.Trainable`` class, named ``algorithm``, that trains that rllib trainer.

    Its ``restore`` reads rllib's checkpoint files only (see `checkpoint_blob`), and its
    ``restore_from_object`` refuses a blob saved as a pickled dict (rllib never saves
    one), so restoring a trial unpickles nothing.

    Args:
        algorithm: an rllib ``--run`` name.
        own_resources: the trial asks for the trainer's ``default_resource_request``
            (driver CPU/GPU plus its workers'); False: ``resources_per_trial`` decides.
        restore_from: an rllib checkpoint (a ``checkpoint-<N>`` file or its directory)
            that every trial restores when it starts (``rllib train --restore``).
    """

    from rayfield.rllib.agents.registry import get_trainer_class

    # Tune's one adapter runs the trainer through its Trainable contract (train, save,
    # restore, stop, default_resource_request, reset_config); this adds rllib's own
    # checkpoint layout, the restore that unpickles nothing, and the export formats.
    adapted: Any = tune.as_trainable(get_trainer_class(algorithm))

    class RLlibTrainable(adapted):
        _algorithm = algorithm
        _restore_path = restore_from

        @classmethod
        def default_resource_request(cls, config: dict[str, Any]) -> Any:
            return super().default_resource_request(config) if own_resources else None

        @property
        def trainer(self) -> Any:
            """The rllib trainer this trial trains."""
            return self.inner

        def setup(self, config: dict[str, Any]) -> None:
            # the trial directory is the trainer's log dir (output: "logdir" writes there)
            from rayfield.rllib.result_files import LogDir

            trial_dir = LogDir(self.logdir)
            self.inner = self._inner_cls(config=config, logger_creator=lambda _config: trial_dir)
            if self._restore_path:
                self.restore(self._restore_path)

        def restore(self, checkpoint_path: str) -> None:
            """Restore an rllib checkpoint (a ``checkpoint-<N>`` file or its directory,
            as rllib or Tune saved it) from rllib's files, with Tune's counters taken
            from its ``algorithm_state.json``; Tune's ``.tune_metadata`` is not read.

            Raises:
                FileNotFoundError: not an rllib checkpoint.
                UnsafeFileError: the checkpoint is not this user's alone.
            """
            self.restore_from_object(checkpoint_blob(checkpoint_path))

        def restore_from_object(self, blob: dict[str, Any]) -> None:
            """Tune's restore of a blob, refusing one saved as a pickled dict.

            Raises:
                ValueError: the blob says it holds a pickled dict.
            """
            if blob["meta"].get("saved_as_dict"):
                raise ValueError(
                    f"refusing to restore {self._algorithm}: the checkpoint says it holds a "
                    "pickled dict, which rllib never saves (unpickling it could run any code)"
                )
            super().restore_from_object(blob)

        def save_checkpoint(self, checkpoint_dir: str) -> str:
            return _save_flat(self.inner, checkpoint_dir)

        def _export_model(self, export_formats: list[str], export_dir: str) -> dict[str, str]:
            return _export(self.inner, export_formats, export_dir)

    RLlibTrainable.__name__ = RLlibTrainable.__qualname__ = algorithm
    return RLlibTrainable


def checkpoint_blob(path: str) -> dict[str, Any]:
    """Tune's blob (``{"files": ..., "meta": ...}``) of an rllib checkpoint, made from
    rllib's own files: the files are read with the ownership checks of
    `rayfield.util.private_files`, and the counters of ``meta`` come from
    ``algorithm_state.json``. Nothing is unpickled.

    Args:
        path: a ``checkpoint-<N>`` file or its directory.

    Raises:
        FileNotFoundError: not an rllib checkpoint.
        UnsafeFileError: the directory or a file is not this user's alone.
    """
    from rayfield.rllib.agents import checkpoints
    from rayfield.util import private_files

    directory = checkpoints.checkpoint_dir(path)
    files = {
        name: private_files.read_bytes(directory / name)
        for name in (checkpoints.STATE_FILE, checkpoints.ALGO_FILE)
    }
    algo = json.loads(files[checkpoints.ALGO_FILE])
    entry = f"checkpoint-{int(algo['iteration'])}"
    files[entry] = files[checkpoints.ALGO_FILE]
    meta = {
        "experiment_id": uuid.uuid4().hex,
        "iteration": int(algo["iteration"]),
        "timesteps_total": algo.get("timesteps_total"),
        "time_total": float(algo.get("time_total_s") or 0.0),
        "episodes_total": algo.get("episodes_total"),
        "saved_as_dict": False,
        "relpath": entry,
    }
    return {"files": files, "meta": meta}


def _save_flat(trainer: Any, checkpoint_dir: str) -> str:
    """Save into ``checkpoint_dir`` itself (the trainer writes ``checkpoint_<N>/`` under
    the directory it is given), so that Tune's ``<trial>/checkpoint_<NNNNNN>/`` holds the
    ``checkpoint-<N>`` file that ``rllib rollout`` reads."""
    path = Path(trainer.save(checkpoint_dir))
    for item in path.parent.iterdir():
        shutil.move(str(item), str(Path(checkpoint_dir) / item.name))
    path.parent.rmdir()
    return str(Path(checkpoint_dir) / path.name)


def _export(trainer: Any, export_formats: list[str], export_dir: str) -> dict[str, str]:
    """``model``: the policy's state dict (``model/model.pt``); ``checkpoint``: the full
    policy state (``checkpoint/model.pt``), as RLlib 0.7's ``Trainer._export_model``."""
    exported = {}
    if "model" in export_formats:
        exported["model"] = os.path.join(export_dir, "model")
        trainer.export_policy_model(exported["model"])
    if "checkpoint" in export_formats:
        exported["checkpoint"] = os.path.join(export_dir, "checkpoint")
        trainer.export_policy_checkpoint(exported["checkpoint"])
    return exported
