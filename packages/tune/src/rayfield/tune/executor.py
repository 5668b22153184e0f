"""``ActorExecutor``: carries out the runner's decisions with rayfield actors.

Each running trial is one actor with the trial's resources. With ``reuse_actors`` the
actor of a finished trial is kept and handed the next trial of the same trainable and
resources (no process start; a ``PlacementGroupFactory`` trial's actor keeps its placement
group, and the next trial with an equal factory takes both, as Ray Tune): one
``next_trial`` call ends the old trial on it, resets it to the new config, restores the
new trial's checkpoint and trains it, so a trial switch costs the driver one message.
Results are collected in batches: one ``rayfield.wait`` for the first ready result, then
every other one ready at that moment. For schedulers that do not act per result, a
function trainable returns several results per call (``train_buffered``).

A disk checkpoint this executor wrote is restored as it is. One it did not write (a
resumed experiment's, ``restore=``) is read with ``trusted``: without it, a pickle in it
(a pickled checkpoint dict, an older checkpoint's pickled metadata) fails the trial with
:class:`~rayfield.tune.pickles.UntrustedPickleError`.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections import defaultdict
from typing import Any

import rayfield
from rayfield.tune import actions as A
from rayfield.tune import result as R
from rayfield.tune.driver_sync import DriverSync
from rayfield.tune.registry import get_trainable_cls
from rayfield.tune.trainable import Trainable, read_checkpoint_dir, write_checkpoint_dir
from rayfield.tune.trial import Resources, Trial, TrialCheckpoint
from rayfield.util import remove_placement_group
from rayfield.util.scheduling_strategies import PlacementGroupSchedulingStrategy

__all__ = ["ActorExecutor"]

_DRAIN_TIMEOUT_S = 30.0
TRUST_OPT_IN = "tune.run(..., trusted=True) (Tuner.restore(path, trainable, trusted=True))"


log = logging.getLogger(__name__)


def _supports_reset(cls: type) -> bool:
    reset = getattr(cls, "reset_config", None)
    return reset is not None and reset is not getattr(Trainable, "reset_config", None)


class _Event:
    """What one finished call of a trial gave: results or an error traceback."""

    __slots__ = ("error", "fetch_s", "results", "trial")

    def __init__(
        self,
        trial: Trial,
        results: list[dict[str, Any]],
        error: str | None,
        fetch_s: float = 0.0,
    ) -> None:
        self.trial, self.results, self.error = trial, results, error
        self.fetch_s = fetch_s  # seconds spent fetching, per result


class ActorExecutor:
    """Runs trials as actors.

    Args:
        reuse_actors: keep finished trials' actors for the next trials.
        buffer_results: with more than 1, trials may return up to this many results per
            call (used when the scheduler does not act on each result).
        buffer_time_s: a buffered call returns after at most this long.
        driver_sync: copies trial directories of other nodes to the driver.
        trusted: pickles in checkpoint directories this executor did not write may be
            loaded (``tune.run(..., trusted=True)``).
    """

    _handlers: dict[type, Any]

    def __init__(
        self,
        reuse_actors: bool = True,
        buffer_results: int = 1,
        buffer_time_s: float = 0.2,
        driver_sync: DriverSync | None = None,
        trusted: bool = False,
    ) -> None:
        self.reuse_actors = reuse_actors
        self.trusted = trusted
        self._written: set[str] = set()  # checkpoint directories this executor wrote
        self.driver_sync = driver_sync
        # report ref -> (trial id, the trial's logdir on the driver, the trial's last copy)
        self._syncs: dict[Any, tuple[str, str, bool]] = {}
        self._syncing: set[str] = set()  # trials with a copy asked for during their run
        self.buffer_results = max(1, buffer_results)
        self.buffer_time_s = buffer_time_s
        self._actors: dict[str, Any] = {}
        self._keys: dict[str, tuple[str, Resources]] = {}
        # call ref -> (trial, what the call returns: "one" result, "many" (a list), or
        # "next": a list, or None when the reused actor refused the trial's config, with
        # the (checkpoint blob, batch) to start a fresh actor with then)
        self._inflight: dict[Any, tuple[Trial, str, Any]] = {}
        self._busy: set[str] = set()
        self._cache: dict[tuple[str, Resources], list[Any]] = defaultdict(list)
        # Cached actors whose finished trial's ``stop`` is not sent yet: the next trial's
        # ``next_trial`` call runs it, else the end of :meth:`apply` sends it.
        self._unstopped: list[Any] = []
        # The pending ``stop`` calls of cached actors (by id of the handle): shutdown lets
        # them finish before it kills the actors.
        self._stops: dict[int, Any] = {}
        self._classes: dict[tuple[str, Resources], Any] = {}
        # trial id -> the placement group its actor runs in (PlacementGroupFactory trials)
        self._groups: dict[str, Any] = {}
        # id of a cached actor's handle -> its placement group, kept with it for reuse
        self._cached_groups: dict[int, Any] = {}
        self.actors_started = 0

    # -- decisions -------------------------------------------------------------------
    def apply(self, actions: list[A.Action]) -> list[_Event]:
        """Carry out the runner's ``actions`` in order; returns errors they raised as
        events."""
        errors: list[_Event] = []
        for action in actions:
            try:
                self._handlers[type(action)](self, action)
            except Exception as exc:
                errors.append(_Event(action.trial, [], _format(exc)))
        # Actors no trial of this batch took: their finished trial's cleanup runs now.
        for handle in self._unstopped:
            self._stops[id(handle)] = handle.stop.remote()
        self._unstopped.clear()
        return errors

    def _trial_info(self, trial: Trial) -> dict[str, Any]:
        return {"trial_id": trial.trial_id, "trial_name": str(trial), "logdir": trial.logdir}

    def _actor_class(self, key: tuple[str, Resources]) -> Any:
        cls = self._classes.get(key)
        if cls is None:
            res = key[1]
            custom = dict(res.custom_resources)
            options: dict[str, Any] = {"num_cpus": res.cpu, "num_gpus": res.gpu}
            if custom:
                options["resources"] = custom
            cls = rayfield.remote(**options)(get_trainable_cls(key[0]))
            self._classes[key] = cls
        return cls

    def _new_actor(self, trial: Trial, key: tuple[str, Resources]) -> Any:
        for other, handles in list(self._cache.items()):
            if other != key:  # cached actors hold resources another shape may need
                for handle in handles:
                    self._stops.pop(id(handle), None)
                    self._end_cached(handle)
                del self._cache[other]
        cls = self._actor_class(key)
        self.actors_started += 1
        factory = key[1].placement_group_factory()
        if factory is not None:
            # All bundles are reserved at once; the actor starts in bundle 0 once the group
            # is placed, and what it starts itself lands in the group (captured).
            self._remove_group(trial.trial_id)
            group = self._groups[trial.trial_id] = factory.reserve()
            cls = cls.options(
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    group,
                    placement_group_bundle_index=0,
                    placement_group_capture_child_tasks=True,
                )
            )
        # Every trainable class is a tune.Trainable here (the registry adapts the others).
        return cls.remote(config=trial.config, trial_info=self._trial_info(trial))

    def _end_cached(self, handle: Any) -> None:
        """Kill a cached actor and free the placement group it kept, if any."""
        _kill(handle)
        group = self._cached_groups.pop(id(handle), None)
        if group is not None:
            try:
                remove_placement_group(group)
            except Exception as exc:
                log.warning("removing the placement group of a cached actor failed: %s", exc)

    def _remove_group(self, trial_id: str) -> None:
        """Free the placement group of ``trial_id``'s actor, if it has one (this ends
        what runs in it)."""
        group = self._groups.pop(trial_id, None)
        if group is not None:
            try:
                remove_placement_group(group)
            except Exception as exc:
                log.warning("removing the placement group of trial %s failed: %s", trial_id, exc)

    def _do_start(self, d: A.StartTrial) -> None:
        trial = d.trial
        key = (trial.trainable_name, trial.resources)
        blob = self._blob(d.checkpoint)
        if blob is None and trial.restore_path and not trial.last_result:
            blob = self._read_dir(trial.restore_path)
        if self.driver_sync is not None:
            self.driver_sync.on_trial_start(trial.trial_id)
        self._keys[trial.trial_id] = key
        if (
            self.reuse_actors
            and self._cache.get(key)
            and _supports_reset(get_trainable_cls(trial.trainable_name))
        ):
            handle = self._cache[key].pop()
            self._stops.pop(id(handle), None)
            group = self._cached_groups.pop(id(handle), None)
            if group is not None:  # the actor's group goes on with it (equal factories)
                self._groups[trial.trial_id] = group
            stop_first = any(h is handle for h in self._unstopped)
            self._unstopped = [h for h in self._unstopped if h is not handle]
            self._actors[trial.trial_id] = handle
            count = max(self.buffer_results, d.batch or 1)
            ref = handle.next_trial.remote(
                trial.config,
                self._trial_info(trial),
                stop_first,
                blob,
                count,
                self.buffer_time_s,
                trial.stopping_criterion,
            )
            self._inflight[ref] = (trial, "next", (blob, d.batch))
            self._busy.add(trial.trial_id)
            return
        self._start_fresh(trial, blob, d.batch)

    def _start_fresh(self, trial: Trial, blob: Any, batch: int | None) -> None:
        """Start ``trial`` on a new actor: restore ``blob`` (if any), then train it."""
        handle = self._new_actor(trial, self._keys[trial.trial_id])
        self._actors[trial.trial_id] = handle
        if blob is not None:
            handle.restore_from_object.remote(blob)
        self._train(trial, batch)

    def _blob(self, checkpoint: TrialCheckpoint | None) -> Any:
        if checkpoint is None or checkpoint.value is None:
            return None
        if isinstance(checkpoint.value, str):
            return self._read_dir(checkpoint.value)
        return checkpoint.value

    def _read_dir(self, path: str) -> dict[str, Any]:
        trusted = self.trusted or os.path.normpath(path) in self._written
        return read_checkpoint_dir(path, trusted=trusted, opt_in=TRUST_OPT_IN)

    def _write_dir(self, blob: dict[str, Any], path: str) -> None:
        write_checkpoint_dir(blob, path)
        self._written.add(os.path.normpath(path))

    def _train(self, trial: Trial, batch: int | None = None) -> None:
        """Ask ``trial``'s actor for its next result, or up to ``batch`` of them (the
        scheduler's hint) or ``buffer_results`` when that is larger."""
        if trial.trial_id in self._busy:
            return  # a buffered call is already running for this trial
        handle = self._actors[trial.trial_id]
        self._sync_if_due(trial, handle)
        count = max(self.buffer_results, batch or 1)
        if count > 1:
            ref = handle.train_buffered.remote(count, self.buffer_time_s, trial.stopping_criterion)
        else:
            ref = handle.train.remote()
        self._inflight[ref] = (trial, "many" if count > 1 else "one", None)
        self._busy.add(trial.trial_id)

    def _sync_if_due(self, trial: Trial, handle: Any) -> None:
        """Ask ``trial``'s actor for a copy of its directory (``sync_to_driver``) when one
        is due and none is pending; it runs before the next training call."""
        sync = self.driver_sync
        if (
            sync is None
            or trial.trial_id in self._syncing
            or not sync.due(trial.trial_id)
            or not sync.wanted()
        ):
            return
        sync.asked(trial.trial_id)
        ref = handle.trial_dir_report.remote(sync.driver_node, sync.with_files)
        self._syncs[ref] = (trial.trial_id, trial.logdir, False)
        self._syncing.add(trial.trial_id)

    def _do_continue(self, d: A.TrainTrial) -> None:
        # Results come in batches: a later result of the batch may have ended the trial.
        if d.trial.status == Trial.RUNNING and d.trial.trial_id in self._actors:
            self._train(d.trial, d.batch)

    def _release(self, trial: Trial, error: bool, wait_for: Any = None) -> None:
        """Free ``trial``'s actor: cache it for reuse, or end it once ``wait_for`` (a
        pending save) and its ``stop`` are done; kill it at once after an error."""
        handle = self._actors.pop(trial.trial_id, None)
        key = self._keys.pop(trial.trial_id, None)
        busy = trial.trial_id in self._busy
        self._busy.discard(trial.trial_id)
        for ref, (t, _, _) in list(self._inflight.items()):
            if t is trial:
                del self._inflight[ref]
        if self.driver_sync is not None:
            self.driver_sync.on_trial_end(trial.trial_id)
        if handle is None:
            self._remove_group(trial.trial_id)
            return
        if error or busy or key is None:
            _kill(handle)
            self._remove_group(trial.trial_id)
            return
        sync_ref = None
        if self.driver_sync is not None and self.driver_sync.wanted():
            sync = self.driver_sync
            sync_ref = handle.trial_dir_report.remote(sync.driver_node, sync.with_files)
            self._syncs[sync_ref] = (trial.trial_id, trial.logdir, trial.is_finished())
        if (
            self.reuse_actors
            # a factory trial's actor is cached with its group (reused by equal factories)
            and (not key[1].bundles or trial.trial_id in self._groups)
            and _supports_reset(get_trainable_cls(key[0]))
        ):
            if key[1].bundles:
                self._cached_groups[id(handle)] = self._groups.pop(trial.trial_id)
            self._cache[key].append(handle)
            self._unstopped.append(handle)  # stopped by the next trial's call or apply()
            return
        stop_ref = handle.stop.remote()
        # A kill fails the actor's pending calls: let the save and the cleanup finish.
        pending = [r for r in (wait_for, sync_ref, stop_ref) if r is not None]
        rayfield.wait(pending, num_returns=len(pending), timeout=_DRAIN_TIMEOUT_S)
        _kill(handle)
        self._remove_group(trial.trial_id)

    def _do_stop(self, d: A.ReleaseTrial) -> None:
        self._release(d.trial, d.error)

    def _do_pause(self, d: A.PauseTrial) -> None:
        handle = self._actors.get(d.trial.trial_id)
        ref = None
        if handle is not None:
            ref = d.checkpoint.value = handle.save_to_object.remote()
        self._release(d.trial, False, wait_for=ref)

    def _do_save(self, d: A.SaveTrial) -> None:
        handle = self._actors.get(d.trial.trial_id)
        checkpoint = d.checkpoint
        if handle is None:
            return
        ref = handle.save_to_object.remote()
        if checkpoint.storage == "memory":
            checkpoint.value = ref
        else:
            self._write_dir(rayfield.get(ref), checkpoint.value)
            if self.driver_sync is not None:
                self.driver_sync.on_checkpoint(d.trial.trial_id)

    def _do_persist(self, d: A.PersistCheckpoint) -> None:
        r = d.checkpoint.result
        meta = {
            "experiment_id": r.get(R.EXPERIMENT_ID, ""),
            "iteration": r.get(R.TRAINING_ITERATION, 0),
            "timesteps_total": r.get(R.TIMESTEPS_TOTAL),
            "time_total": r.get(R.TIME_TOTAL_S, 0.0),
            "episodes_total": r.get(R.EPISODES_TOTAL),
            "saved_as_dict": False,
            "relpath": ".",
        }
        self._write_dir({"files": d.blob["files"], "meta": meta}, d.checkpoint.value)
        if self.driver_sync is not None:
            self.driver_sync.on_checkpoint(d.trial.trial_id)

    def _do_export(self, d: A.ExportModel) -> None:
        handle = self._actors.get(d.trial.trial_id)
        if handle is not None:
            export_dir = os.path.join(d.trial.logdir, "export")
            rayfield.get(handle.export_model.remote(d.trial.export_formats, export_dir))

    def _do_delete(self, d: A.DeleteCheckpoint) -> None:
        if isinstance(d.checkpoint.value, str):
            shutil.rmtree(d.checkpoint.value, ignore_errors=True)
            self._written.discard(os.path.normpath(d.checkpoint.value))

    def _do_reset(self, d: A.ResetTrial) -> None:
        trial = d.trial
        handle = self._actors.get(trial.trial_id)
        if handle is None:
            return
        blob = self._blob(d.checkpoint)
        ok = _supports_reset(get_trainable_cls(trial.trainable_name)) and rayfield.get(
            handle.reset.remote(trial.config, self._trial_info(trial))
        )
        if not ok:
            _kill(handle)
            self._remove_group(trial.trial_id)
            handle = self._new_actor(trial, self._keys[trial.trial_id])
            self._actors[trial.trial_id] = handle
        if blob is not None:
            handle.restore_from_object.remote(blob)

    # -- results ---------------------------------------------------------------------
    def apply_syncs(self, timeout_s: float = 0.0) -> None:
        """Write the trial directories of other nodes that have arrived (waiting up to
        ``timeout_s`` for all); a failed copy is logged, the run goes on."""
        if not self._syncs or self.driver_sync is None:
            return
        refs = list(self._syncs)
        ready, _ = rayfield.wait(refs, num_returns=len(refs), timeout=timeout_s)
        for ref in ready:
            trial_id, logdir, last = self._syncs.pop(ref)
            self._syncing.discard(trial_id)
            try:
                self.driver_sync.apply(logdir, rayfield.get(ref), trial_id, last)
            except Exception as exc:
                log.warning("sync_to_driver of %s failed: %s", logdir, exc)

    def poll(self, timeout_s: float) -> list[_Event]:
        """Results of every call finished within ``timeout_s`` (at least one if any);
        the directory copies that arrived meanwhile are written."""
        refs = list(self._inflight)
        if not refs:
            self.apply_syncs()
            return []
        # The pending copies are waited on too: a wait that blocks is what makes this
        # node fetch them from the trial's node (and one that arrives wakes the loop).
        copies = list(self._syncs)
        ready, _ = rayfield.wait([*refs, *copies], num_returns=1, timeout=timeout_s)
        if copies:
            self.apply_syncs()
        if not ready:
            return []
        if len(refs) > 1 or copies:
            ready, _ = rayfield.wait(refs, num_returns=len(refs), timeout=0)
            if not ready:
                return []
        started = time.perf_counter()
        try:
            values = rayfield.get(ready)
        except Exception:
            values = None
        fetched = time.perf_counter() - started
        events = []
        for i, ref in enumerate(ready):
            trial, kind, extra = self._inflight.pop(ref)
            self._busy.discard(trial.trial_id)
            try:
                value = values[i] if values is not None else rayfield.get(ref)
                if kind == "next" and value is None:  # reset_config refused the config
                    _kill(self._actors[trial.trial_id])
                    self._start_fresh(trial, *extra)
                    continue
            except Exception as exc:
                events.append(_Event(trial, [], _format(exc)))
                continue
            events.append(_Event(trial, [value] if kind == "one" else value, None))
        count = sum(len(e.results) for e in events) or 1
        for event in events:
            event.fetch_s = fetched / count
        return events

    def has_running(self) -> bool:
        return bool(self._inflight)

    def shutdown(self) -> None:
        """End every actor this executor started (after the pending ``sync_to_driver``
        copies and the cached actors' ``stop`` calls, up to 30 s each)."""
        self.apply_syncs(timeout_s=30.0)
        stops = list(self._stops.values())  # the last trials' cleanup, before the kill
        if stops:
            rayfield.wait(stops, num_returns=len(stops), timeout=_DRAIN_TIMEOUT_S)
        self._stops.clear()
        for handle in self._actors.values():
            _kill(handle)
        for handles in self._cache.values():
            for handle in handles:
                self._end_cached(handle)
        for trial_id in list(self._groups):
            self._remove_group(trial_id)
        self._actors.clear()
        self._cache.clear()
        self._inflight.clear()
        self._busy.clear()
        self._unstopped.clear()


# What carries out each action of the runner.
ActorExecutor._handlers = {
    A.StartTrial: ActorExecutor._do_start,
    A.TrainTrial: ActorExecutor._do_continue,
    A.ReleaseTrial: ActorExecutor._do_stop,
    A.PauseTrial: ActorExecutor._do_pause,
    A.SaveTrial: ActorExecutor._do_save,
    A.PersistCheckpoint: ActorExecutor._do_persist,
    A.ExportModel: ActorExecutor._do_export,
    A.DeleteCheckpoint: ActorExecutor._do_delete,
    A.ResetTrial: ActorExecutor._do_reset,
}


def _kill(handle: Any) -> None:
    try:
        rayfield.kill(handle)
    except Exception:
        pass


def _format(exc: BaseException) -> str:
    import traceback

    text = str(exc)
    if not text or "Traceback" not in text:
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return text
