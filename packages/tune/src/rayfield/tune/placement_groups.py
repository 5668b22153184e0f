"""``tune.PlacementGroupFactory``: a trial's resources as a placement group's bundles.

As Ray Tune's class of that name: the first bundle (the head bundle) holds the trial's
trainable actor; the others are reserved for the actors and tasks the trainable starts
itself (an RLlib trainer's rollout workers). The executor reserves every bundle at once
(one rayfield-core placement group per trial) before the trainable actor starts, runs
the actor in bundle 0 with its child tasks and actors captured by the group, and removes
the group when the trial ends or is paused.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rayfield.tune.error import TuneError

__all__ = ["STRATEGIES", "Bundle", "PlacementGroupFactory"]

STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")

Bundle = tuple[tuple[str, float], ...]  # one bundle, as sorted (resource name, amount) pairs


def _bundle(i: int, spec: Any) -> Bundle:
    if not isinstance(spec, Mapping):
        raise TuneError(
            f"bundle {i} must be a dict of resources such as {{'CPU': 1}}, got "
            f"{type(spec).__name__}"
        )
    out: dict[str, float] = {}
    for name, amount in spec.items():
        if not isinstance(name, str):
            raise TuneError(f"bundle {i}: resource names are strings, got {name!r}")
        key = name.upper() if name.lower() in ("cpu", "gpu") else name
        try:
            value = float(amount)
        except (TypeError, ValueError):
            raise TuneError(f"bundle {i}[{name!r}] must be a number, got {amount!r}") from None
        if not value >= 0 or value == float("inf"):
            raise TuneError(f"bundle {i}[{name!r}] must be finite and >= 0, got {amount!r}")
        if value:
            out[key] = out.get(key, 0.0) + value
    return tuple(sorted(out.items()))


class PlacementGroupFactory:
    """A trial's resources as placement-group bundles (Ray Tune's ``PlacementGroupFactory``).

    Args:
        bundles: a non-empty list of resource dicts, e.g. ``[{"CPU": 1}, {"CPU": 2}]``
            (``cpu``/``gpu`` in any case; other names are custom resources; amounts in
            units of the resource, fractions allowed). Bundle 0 holds the trainable actor.
        strategy: ``"PACK"`` (few nodes), ``"SPREAD"`` (distinct nodes where possible),
            ``"STRICT_PACK"`` (one node) or ``"STRICT_SPREAD"`` (one node a bundle), as
            rayfield-core's :func:`rayfield.util.placement_group`.

    Raises:
        TuneError: no bundle, a bundle that is not a dict, a negative, NaN or infinite
            amount, a bundle that reserves nothing (core cannot reserve it), or an unknown
            strategy.
    """

    def __init__(self, bundles: Any, strategy: str = "PACK") -> None:
        if isinstance(bundles, Mapping) or not isinstance(bundles, (list, tuple)) or not bundles:
            raise TuneError(
                "PlacementGroupFactory needs a non-empty list of bundles such as "
                f"[{{'CPU': 1}}, {{'CPU': 2}}], got {bundles!r}"
            )
        if strategy not in STRATEGIES:
            raise TuneError(f"strategy must be one of {', '.join(STRATEGIES)}, got {strategy!r}")
        parsed = [_bundle(i, b) for i, b in enumerate(bundles)]
        for i, b in enumerate(parsed):
            if not b:
                raise TuneError(f"bundle {i} reserves nothing: give it a resource or drop it")
        self._bundles: tuple[Bundle, ...] = tuple(parsed)
        self.strategy = strategy

    @property
    def bundles(self) -> list[dict[str, float]]:
        """The bundles as dicts (copies), bundle 0 first."""
        return [dict(b) for b in self._bundles]

    @property
    def head_bundle(self) -> dict[str, float]:
        """Bundle 0: what the trainable actor itself holds."""
        return dict(self._bundles[0])

    @property
    def required_resources(self) -> dict[str, float]:
        """The sum of all bundles (what the trial reserves), by resource name."""
        out: dict[str, float] = {}
        for bundle in self._bundles:
            for name, amount in bundle:
                out[name] = out.get(name, 0.0) + amount
        return out

    def reserve(self) -> Any:
        """Reserve the bundles: a new rayfield-core placement group (PENDING until
        placed; see :meth:`rayfield.util.PlacementGroup.ready`).

        Raises:
            RayfieldError: rayfield is not initialised.
        """
        from rayfield.util import placement_group

        return placement_group(self.bundles, strategy=self.strategy)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, PlacementGroupFactory)
            and self._bundles == other._bundles
            and self.strategy == other.strategy
        )

    def __hash__(self) -> int:
        return hash((self._bundles, self.strategy))

    def __repr__(self) -> str:
        return f"PlacementGroupFactory({self.bundles!r}, strategy={self.strategy!r})"
