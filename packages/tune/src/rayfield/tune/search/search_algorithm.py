"""Search algorithms: where trials come from.

The runner asks :meth:`SearchAlgorithm.next_trial` for one trial at a time (None: nothing
now, ask again later) until :meth:`SearchAlgorithm.is_finished`, and reports results and
completions back. :class:`BasicVariantGenerator` expands the config's grid and samplers;
:class:`SearchGenerator` turns a model-based :class:`~rayfield.tune.search.searcher.Searcher`
into trials.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator
from typing import Any

from rayfield.tune.experiment import Experiment, convert_to_experiment_list
from rayfield.tune.search.searcher import Searcher
from rayfield.tune.search.variant_generator import format_vars, generate_variants
from rayfield.tune.trial import Trial

__all__ = ["BasicVariantGenerator", "SearchAlgorithm", "SearchGenerator"]


class SearchAlgorithm:
    """Interface of what the runner calls; the order is

    ``add_configurations`` once, then repeatedly ``next_trial`` (until ``is_finished``),
    ``on_trial_result`` per result of a running trial, and ``on_trial_complete`` once per
    trial (``error=True`` when it failed).
    """

    def add_configurations(self, experiments: Any) -> None:
        raise NotImplementedError

    def next_trial(self) -> Trial | None:
        raise NotImplementedError

    def next_trials(self) -> list[Trial]:
        """Every trial available now (the classic batch form of ``next_trial``)."""
        out = []
        while (trial := self.next_trial()) is not None:
            out.append(trial)
        return out

    def is_finished(self) -> bool:
        raise NotImplementedError

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        pass

    def on_trial_complete(
        self,
        trial_id: str,
        result: dict[str, Any] | None = None,
        error: bool = False,
        early_terminated: bool = False,
    ) -> None:
        pass

    def set_search_properties(self, metric: str | None, mode: str | None) -> bool:
        return True

    def get_state(self) -> dict[str, Any]:
        """What ``set_state`` needs to go on after a resume (JSON-able)."""
        return {}

    def set_state(self, state: dict[str, Any]) -> None:
        pass


class BasicVariantGenerator(SearchAlgorithm):
    """Grid and random search over each experiment's ``config`` (Tune's default).

    Args:
        shuffle: shuffle the variants of each pass over the grid.
        seed: seeds the random sampling (and the shuffle); None draws from the ``random``
            module's global generator, so ``random.seed(n)`` before the run makes the
            search repeatable (as the reference's default global generator).
        max_concurrent: at most this many unfinished trials at once (0: no limit).
    """

    def __init__(
        self, shuffle: bool = False, seed: int | None = None, max_concurrent: int = 0
    ) -> None:
        self._shuffle = shuffle
        self._rng = random.Random(seed) if seed is not None else None
        self._max_concurrent = max_concurrent
        self._iterators: list[Iterator[Trial]] = []
        self._generated = 0
        self._skip = 0
        self._live: set[str] = set()
        self._total = 0

    def add_configurations(self, experiments: Any) -> None:
        for exp in convert_to_experiment_list(experiments):
            self._iterators.append(self._trials(exp))
            if exp.num_samples > 0:
                from rayfield.tune.search.variant_generator import count_variants

                self._total += exp.num_samples * count_variants(exp.spec)

    @property
    def total_samples(self) -> int:
        return self._total

    def _trials(self, exp: Experiment) -> Iterator[Trial]:
        index = 0
        samples = itertools.count() if exp.num_samples == -1 else range(exp.num_samples)
        for _ in samples:
            variants: Any = generate_variants(exp.spec, self._rng)
            if self._shuffle:
                variants = list(variants)
                (self._rng or random._inst).shuffle(variants)
            for resolved, spec in variants:
                tag = str(index)
                formatted = format_vars(resolved)
                if formatted:
                    tag += "_" + formatted
                index += 1
                trial = exp.create_trial(spec, tag)
                trial.evaluated_params = {
                    "/".join(str(p) for p in path[1:]): v
                    for path, v in resolved.items()
                    if path and path[0] == "config"
                }
                yield trial

    def next_trial(self) -> Trial | None:
        if self._max_concurrent and len(self._live) >= self._max_concurrent:
            return None
        while self._iterators:
            trial = next(self._iterators[0], None)
            if trial is None:
                self._iterators.pop(0)
                continue
            self._generated += 1
            if self._generated <= self._skip:  # made before a resume: already known
                continue
            self._live.add(trial.trial_id)
            return trial
        return None

    def on_trial_complete(
        self,
        trial_id: str,
        result: dict[str, Any] | None = None,
        error: bool = False,
        early_terminated: bool = False,
    ) -> None:
        self._live.discard(trial_id)

    def is_finished(self) -> bool:
        return not self._iterators

    def get_state(self) -> dict[str, Any]:
        return {"generated": self._generated}

    def set_state(self, state: dict[str, Any]) -> None:
        self._skip = int(state.get("generated", 0))


class SearchGenerator(SearchAlgorithm):
    """Trials from a :class:`Searcher`'s ``suggest`` (model-based search).

    The searcher's config is merged over each experiment's constant config; ``num_samples``
    is the number of suggestions.
    """

    def __init__(self, searcher: Searcher) -> None:
        self.searcher = searcher
        self._experiment: Experiment | None = None
        self._remaining = 0
        self._counter = 0
        self._finished = False

    def add_configurations(self, experiments: Any) -> None:
        [exp] = convert_to_experiment_list(experiments)
        self._experiment = exp
        self._remaining = exp.num_samples
        self.searcher.set_search_properties(None, None, exp.spec.get("config", {}))

    def set_search_properties(self, metric: str | None, mode: str | None) -> bool:
        return self.searcher.set_search_properties(metric, mode, {})

    def next_trial(self) -> Trial | None:
        exp = self._experiment
        if exp is None or self._finished:
            return None
        if self._remaining == 0:
            self._finished = True
            return None
        trial_id = Trial(exp.trainable_name).trial_id
        suggestion = self.searcher.suggest(trial_id)
        if suggestion is Searcher.FINISHED:
            self._finished = True
            return None
        if suggestion is None:
            return None
        self._remaining -= 1
        self._counter += 1
        spec = dict(exp.spec)
        spec["config"] = _merge(exp.spec.get("config", {}), suggestion)
        from rayfield.tune.search.variant_generator import resolve_once

        resolved = resolve_once(spec)
        flat = {(k,): v for k, v in _flatten(suggestion).items()}
        tag = f"{self._counter}_{format_vars(flat)}" if flat else str(self._counter)
        trial = exp.create_trial(resolved, tag, trial_id=trial_id)
        trial.evaluated_params = _flatten(suggestion)
        return trial

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        self.searcher.on_trial_result(trial_id, result)

    def on_trial_complete(
        self,
        trial_id: str,
        result: dict[str, Any] | None = None,
        error: bool = False,
        early_terminated: bool = False,
    ) -> None:
        self.searcher.on_trial_complete(trial_id, result, error)

    def is_finished(self) -> bool:
        return self._finished

    def get_state(self) -> dict[str, Any]:
        return {"remaining": self._remaining, "counter": self._counter}

    def set_state(self, state: dict[str, Any]) -> None:
        self._remaining = int(state.get("remaining", self._remaining))
        self._counter = int(state.get("counter", 0))


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def _flatten(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flatten(value, name + "/"))
        else:
            out[name] = value
    return out
