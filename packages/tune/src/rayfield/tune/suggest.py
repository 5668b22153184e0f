"""Classic module name ``ray.tune.suggest``: the search algorithms."""

from __future__ import annotations

from rayfield.tune.search import (
    BasicVariantGenerator,
    ConcurrencyLimiter,
    Repeater,
    SearchAlgorithm,
    Searcher,
    SuggestionAlgorithm,
)

__all__ = [
    "BasicVariantGenerator",
    "ConcurrencyLimiter",
    "Repeater",
    "SearchAlgorithm",
    "Searcher",
    "SuggestionAlgorithm",
]
