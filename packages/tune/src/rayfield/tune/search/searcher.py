"""``Searcher``: the interface of model-based search methods, and its wrappers.

Call order, per trial: ``suggest(trial_id)`` (a config; None when it cannot suggest now,
``Searcher.FINISHED`` when it is done), then ``on_trial_result`` for each intermediate
result, then ``on_trial_complete`` exactly once (``error=True`` if the trial failed).
``save``/``restore`` persist the searcher's state to a file (mode 0600): JSON when it is
made of plain JSON values, else a pickle, which ``restore`` loads only with
``trusted=True`` (see :mod:`rayfield.tune.pickles`).
"""

from __future__ import annotations

import copy
from typing import Any

from rayfield.tune.error import TuneError
from rayfield.tune.pickles import dump_data, load_data

__all__ = ["ConcurrencyLimiter", "Repeater", "Searcher"]


class Searcher:
    """Base class of search methods.

    Args:
        metric: the result key to optimise (may be set later by ``tune.run``).
        mode: ``"min"`` or ``"max"``.

    Raises:
        ValueError: ``mode`` is neither ``"min"`` nor ``"max"``.
    """

    FINISHED = "FINISHED"

    def __init__(self, metric: str | None = None, mode: str | None = None) -> None:
        if mode not in (None, "min", "max"):
            raise ValueError(f"mode must be 'min' or 'max', got {mode!r}")
        self.metric = metric
        self.mode = mode

    def set_search_properties(
        self, metric: str | None, mode: str | None, config: dict[str, Any]
    ) -> bool:
        """Fill in metric/mode (and the space) from ``tune.run`` when not given here."""
        if self.metric is None and metric is not None:
            self.metric = metric
        if self.mode is None and mode is not None:
            self.mode = mode
        return True

    def suggest(self, trial_id: str) -> dict[str, Any] | None:
        """A config for a new trial, None to wait, or ``Searcher.FINISHED``."""
        raise NotImplementedError

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        """An intermediate result of a trial this searcher suggested."""

    def on_trial_complete(
        self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False
    ) -> None:
        """The trial ended (``result`` is its last result; ``error`` if it failed)."""

    def save(self, checkpoint_path: str) -> None:
        """Write the searcher's state (its attributes) to ``checkpoint_path``, mode 0600:
        JSON when they are plain JSON values, else a pickle.

        Raises:
            UnsafeFileError: the file's directory is not this user's alone.
        """
        dump_data(checkpoint_path, self.__dict__)

    def restore(self, checkpoint_path: str, *, trusted: bool = False) -> None:
        """Load the state written by :meth:`save`.

        Args:
            checkpoint_path: the file.
            trusted: the file is yours: a pickled state may be loaded (loading a pickle
                runs any code its author put in it).

        Raises:
            UntrustedPickleError: the state is a pickle and ``trusted`` is False.
            UnsafeFileError: the file is not this user's alone.
            TuneError: the file does not hold a searcher's state.
        """
        self.__dict__.update(restore_state(checkpoint_path, trusted, "Searcher"))

    def score(self, result: dict[str, Any]) -> float | None:
        """``result[metric]`` signed so that larger is better (None when missing)."""
        if not result or self.metric is None or self.metric not in result:
            return None
        value = float(result[self.metric])
        return -value if self.mode == "min" else value


def restore_state(path: str, trusted: bool, cls: str) -> dict[str, Any]:
    """The dict :meth:`Searcher.save` wrote in ``path`` (a pickle only when ``trusted``).

    Raises:
        UntrustedPickleError: it is a pickle and ``trusted`` is False.
        TuneError: it is not a dict.
    """
    state = load_data(path, trusted=trusted, opt_in=f"{cls}.restore(path, trusted=True)")
    if not isinstance(state, dict):
        raise TuneError(f"{path} does not hold a searcher's state (a dict)")
    return state


class _Wrapper(Searcher):
    """A searcher around another one (``self.searcher``), sharing its metric and mode."""

    def __init__(self, searcher: Searcher) -> None:
        super().__init__(searcher.metric, searcher.mode)
        self.searcher = searcher

    def set_search_properties(
        self, metric: str | None, mode: str | None, config: dict[str, Any]
    ) -> bool:
        self.searcher.set_search_properties(metric, mode, config)
        return super().set_search_properties(metric, mode, config)


class ConcurrencyLimiter(_Wrapper):
    """At most ``max_concurrent`` of ``searcher``'s trials unfinished at once.

    Raises:
        ValueError: ``max_concurrent`` < 1.
    """

    def __init__(self, searcher: Searcher, max_concurrent: int, batch: bool = False) -> None:
        if max_concurrent < 1:
            raise ValueError(f"max_concurrent must be >= 1, got {max_concurrent}")
        super().__init__(searcher)
        self.max_concurrent = max_concurrent
        self.batch = batch
        self.live: set[str] = set()
        self._batch_done: set[str] = set()

    def suggest(self, trial_id: str) -> dict[str, Any] | None:
        if len(self.live) >= self.max_concurrent:
            return None
        if self.batch and self._batch_done and len(self._batch_done) < self.max_concurrent:
            return None
        if self.batch and len(self._batch_done) >= self.max_concurrent:
            self._batch_done.clear()
        suggestion = self.searcher.suggest(trial_id)
        if isinstance(suggestion, dict):
            self.live.add(trial_id)
        return suggestion

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        self.searcher.on_trial_result(trial_id, result)

    def on_trial_complete(
        self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False
    ) -> None:
        if trial_id not in self.live:
            return
        self.live.discard(trial_id)
        if self.batch:
            self._batch_done.add(trial_id)
        self.searcher.on_trial_complete(trial_id, result, error)


class Repeater(_Wrapper):
    """Evaluate each of ``searcher``'s configs ``repeat`` times; report the mean.

    Each repeat gets ``config[REPEAT_KEY]`` = its index (``set_index``); the wrapped
    searcher sees one completion per config, with ``metric`` averaged over the repeats.

    Raises:
        ValueError: ``repeat`` < 1.
    """

    REPEAT_KEY = "__trial_index__"

    def __init__(self, searcher: Searcher, repeat: int = 1, set_index: bool = True) -> None:
        if repeat < 1:
            raise ValueError(f"repeat must be >= 1, got {repeat}")
        super().__init__(searcher)
        self.repeat = repeat
        self.set_index = set_index
        self._current: dict[str, Any] | None = None
        self._group_id = ""
        self._issued = 0
        self._groups: dict[str, dict[str, Any]] = {}
        self._trial_group: dict[str, str] = {}

    def suggest(self, trial_id: str) -> dict[str, Any] | None:
        if self._current is None or self._issued >= self.repeat:
            suggestion = self.searcher.suggest(trial_id)
            if not isinstance(suggestion, dict):
                return suggestion
            self._current, self._group_id, self._issued = suggestion, trial_id, 0
            self._groups[trial_id] = {"pending": self.repeat, "results": []}
        config = copy.deepcopy(self._current)
        if self.set_index:
            config[self.REPEAT_KEY] = self._issued
        self._issued += 1
        self._trial_group[trial_id] = self._group_id
        return config

    def on_trial_complete(
        self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False
    ) -> None:
        group_id = self._trial_group.pop(trial_id, None)
        if group_id is None:
            return
        group = self._groups[group_id]
        group["pending"] -= 1
        if result and not error and self.metric in result:
            group["results"].append(result)
        if group["pending"] > 0:
            return
        del self._groups[group_id]
        results = group["results"]
        if not results:
            self.searcher.on_trial_complete(group_id, None, error=True)
            return
        metric = str(self.metric)
        mean = sum(float(r[metric]) for r in results) / len(results)
        self.searcher.on_trial_complete(group_id, {**results[-1], metric: mean})
