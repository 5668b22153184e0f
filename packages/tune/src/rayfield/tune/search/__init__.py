"""Search spaces and search algorithms (``rayfield.tune.search``; classic ``suggest``).

The search algorithms are imported on first use, so that importing
``rayfield.tune.search.sample`` (as every trial's actor does) stays light.
"""

from __future__ import annotations

from rayfield.tune.lazy import lazy_getattr

__getattr__ = lazy_getattr(
    __name__,
    {
        "BasicVariantGenerator": "rayfield.tune.search.search_algorithm:BasicVariantGenerator",
        "SearchAlgorithm": "rayfield.tune.search.search_algorithm:SearchAlgorithm",
        "SearchGenerator": "rayfield.tune.search.search_algorithm:SearchGenerator",
        "SuggestionAlgorithm": "rayfield.tune.search.search_algorithm:SearchGenerator",
        "ConcurrencyLimiter": "rayfield.tune.search.searcher:ConcurrencyLimiter",
        "Repeater": "rayfield.tune.search.searcher:Repeater",
        "Searcher": "rayfield.tune.search.searcher:Searcher",
    },
)


__all__ = [
    "BasicVariantGenerator",
    "ConcurrencyLimiter",
    "Repeater",
    "SearchAlgorithm",
    "SearchGenerator",
    "Searcher",
    "SuggestionAlgorithm",
]
