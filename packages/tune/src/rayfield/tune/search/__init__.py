"""Search spaces and search algorithms (``rayfield.tune.search``; classic ``suggest``)."""

from __future__ import annotations

from rayfield.tune.search.search_algorithm import (
    BasicVariantGenerator,
    SearchAlgorithm,
    SearchGenerator,
)
from rayfield.tune.search.searcher import ConcurrencyLimiter, Repeater, Searcher

SuggestionAlgorithm = SearchGenerator

__all__ = [
    "BasicVariantGenerator",
    "ConcurrencyLimiter",
    "Repeater",
    "SearchAlgorithm",
    "SearchGenerator",
    "Searcher",
    "SuggestionAlgorithm",
]
