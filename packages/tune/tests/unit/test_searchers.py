"""Searcher interface, SearchGenerator, ConcurrencyLimiter and Repeater."""

from __future__ import annotations

import pytest

from rayfield import tune
from rayfield.tune.search import ConcurrencyLimiter, Repeater, Searcher, SearchGenerator


class CountingSearcher(Searcher):
    """Suggests x = 0, 1, 2, ...; records what it is told."""

    def __init__(self, limit=None, **kw):
        super().__init__(**kw)
        self.next_x = 0
        self.limit = limit
        self.completed: list[tuple[str, object, bool]] = []
        self.results: list[str] = []

    def suggest(self, trial_id):
        if self.limit is not None and self.next_x >= self.limit:
            return Searcher.FINISHED
        self.next_x += 1
        return {"x": self.next_x - 1}

    def on_trial_result(self, trial_id, result):
        self.results.append(trial_id)

    def on_trial_complete(self, trial_id, result=None, error=False):
        self.completed.append((trial_id, result, error))


def experiment(num_samples=5, config=None):
    return tune.Experiment(
        "e",
        lambda c: None,
        config=config or {"const": 1},
        num_samples=num_samples,
        local_dir="/tmp/x",
    )


def test_search_generator_merges_suggestions_and_counts_samples():
    gen = SearchGenerator(CountingSearcher())
    gen.add_configurations(experiment(num_samples=3))
    trials = gen.next_trials()
    assert [t.config for t in trials] == [{"const": 1, "x": i} for i in range(3)]
    assert [t.experiment_tag for t in trials] == ["1_x=0", "2_x=1", "3_x=2"]
    assert gen.is_finished()


def test_searcher_finished_ends_the_search():
    gen = SearchGenerator(CountingSearcher(limit=2))
    gen.add_configurations(experiment(num_samples=10))
    assert len(gen.next_trials()) == 2 and gen.is_finished()


def test_concurrency_limiter_waits_for_completions():
    base = CountingSearcher()
    limiter = ConcurrencyLimiter(base, max_concurrent=2)
    assert limiter.suggest("a") == {"x": 0}
    assert limiter.suggest("b") == {"x": 1}
    assert limiter.suggest("c") is None
    limiter.on_trial_complete("a", {"m": 1})
    assert limiter.suggest("c") == {"x": 2}
    assert [c[0] for c in base.completed] == ["a"]
    limiter.on_trial_complete("zzz", {"m": 1})  # not one of its trials: ignored
    assert len(base.completed) == 1
    with pytest.raises(ValueError, match="max_concurrent"):
        ConcurrencyLimiter(base, 0)


def test_repeater_repeats_and_reports_the_mean():
    base = CountingSearcher(metric="score", mode="max")
    rep = Repeater(base, repeat=3)
    configs = [rep.suggest(f"t{i}") for i in range(6)]
    assert [c["x"] for c in configs] == [0, 0, 0, 1, 1, 1]
    assert [c[Repeater.REPEAT_KEY] for c in configs] == [0, 1, 2, 0, 1, 2]
    for i, score in enumerate([1.0, 2.0, 6.0]):
        rep.on_trial_complete(f"t{i}", {"score": score})
    assert base.completed == [("t0", {"score": 3.0}, False)]


def test_searcher_save_restore_round_trip(tmp_path):
    s = CountingSearcher()
    s.suggest("a")
    s.suggest("b")
    s.save(str(tmp_path / "s.pkl"))
    fresh = CountingSearcher()
    fresh.restore(str(tmp_path / "s.pkl"))
    assert fresh.suggest("c") == {"x": 2}


def test_searcher_mode_is_checked_and_score_is_signed():
    with pytest.raises(ValueError, match="mode"):
        CountingSearcher(mode="up")
    s = CountingSearcher(metric="loss", mode="min")
    assert s.score({"loss": 2.0}) == -2.0
    assert s.score({}) is None


def test_basic_variant_generator_max_concurrent_and_resume_skip():
    gen = tune.search.BasicVariantGenerator(max_concurrent=2)
    gen.add_configurations(experiment(num_samples=5))
    a, _ = gen.next_trial(), gen.next_trial()
    assert gen.next_trial() is None
    gen.on_trial_complete(a.trial_id)
    assert gen.next_trial() is not None
    state = gen.get_state()
    again = tune.search.BasicVariantGenerator()
    again.set_state(state)
    again.add_configurations(experiment(num_samples=5))
    assert len(again.next_trials()) == 2  # 3 were made before the "resume"
