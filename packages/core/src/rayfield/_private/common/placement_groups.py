"""Placement groups: what a group is, the checks of its arguments, and resource renaming.

A placement group reserves *bundles* (resource dicts such as ``{"CPU": 1}``) on the
cluster's nodes, all or none (Ray 2.x's ``ray.util.placement_group``). A reserved bundle
leaves its node's plain resources and is added back under group names, as Ray does: a
bundle ``i`` of ``{"CPU": 1}`` in group ``g`` (hex id) on node N takes 1 ``CPU`` away from
N's totals and adds ``CPU_group_<i>_<g>`` = 1 and ``CPU_group_<g>`` += 1, plus
``bundle_group_<i>_<g>`` = 1000 and ``bundle_group_<g>`` += 1000 (what zero-resource work
in the group demands, so it is pinned to the group's nodes too).

Work placed in bundle ``i`` demands the renamed resources of bundle ``i`` (so it runs only
on that bundle's node, from that bundle's share); with index ``-1`` it demands the
group-wide names (any bundle's node). :func:`bundle_demand` does the renaming and the
"can it ever fit" check. Everything here is pure.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "BUNDLE_UNIT",
    "CREATED",
    "DETACHED",
    "PENDING",
    "REMOVED",
    "RESCHEDULING",
    "STRATEGIES",
    "GroupHandle",
    "GroupRef",
    "Strategy",
    "bundle_demand",
    "check_bundles",
    "check_lifetime",
    "check_strategy",
    "committed_resources",
    "group_of",
    "group_resource",
    "is_group_resource",
    "node_totals",
    "with_reserved",
]

Strategy = Literal["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"]
STRATEGIES: tuple[str, ...] = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")
PENDING, CREATED, REMOVED, RESCHEDULING = "PENDING", "CREATED", "REMOVED", "RESCHEDULING"
DETACHED = "detached"
BUNDLE_UNIT = 1000.0
"""Amount of ``bundle_group_*`` a committed bundle adds (as Ray's ``bundle`` resource)."""
_WORK_SHARE = 0.001
"""Amount of ``bundle_group_*`` every piece of work in a group demands."""
MAX_AMOUNT = 1e9


@dataclass(frozen=True)
class GroupRef:
    """What a task or actor carries of the group it was placed in (in its payload).

    Attributes:
        pg_id: the group's id (bytes).
        bundles: the group's bundle specs, in order.
        strategy: one of :data:`STRATEGIES`.
        bundle_index: the bundle the work was placed in (-1: any).
        capture: child tasks and actors the work submits go into the same group.
    """

    pg_id: bytes
    bundles: tuple[Mapping[str, float], ...]
    strategy: str
    bundle_index: int = -1
    capture: bool = False

    def to_wire(self) -> dict[str, Any]:
        """A plain dict for the task payload."""
        return {
            "id": self.pg_id,
            "bundles": [dict(b) for b in self.bundles],
            "strategy": self.strategy,
            "index": self.bundle_index,
            "capture": self.capture,
        }

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> GroupRef:
        """Read :meth:`to_wire`'s dict."""
        return cls(
            bytes(data["id"]),
            tuple(dict(b) for b in data["bundles"]),
            str(data["strategy"]),
            int(data.get("index", -1)),
            bool(data.get("capture", False)),
        )


class GroupHandle:
    """What identifies a placement group: its id, bundles and strategy. The public
    ``rayfield.util.placement_group.PlacementGroup`` adds ``ready()`` and ``wait()``.

    Args:
        pg_id: the group's id (bytes).
        bundles: its bundle specs, in order.
        strategy: one of :data:`STRATEGIES`.
    """

    def __init__(
        self, pg_id: bytes, bundles: Sequence[Mapping[str, float]], strategy: str = "PACK"
    ) -> None:
        self._pg_id = bytes(pg_id)
        self._bundles = [dict(b) for b in bundles]
        self._strategy = strategy

    @property
    def bundle_specs(self) -> list[dict[str, float]]:
        """The bundles, in order (copies)."""
        return [dict(b) for b in self._bundles]

    @property
    def bundle_count(self) -> int:
        """How many bundles the group has."""
        return len(self._bundles)

    @property
    def strategy(self) -> str:
        """PACK, SPREAD, STRICT_PACK or STRICT_SPREAD."""
        return self._strategy

    def ref(self, bundle_index: int = -1, capture: bool = False) -> GroupRef:
        """What work placed in this group carries."""
        return GroupRef(self._pg_id, tuple(self._bundles), self._strategy, bundle_index, capture)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, GroupHandle) and other._pg_id == self._pg_id

    def __hash__(self) -> int:
        return hash(self._pg_id)

    def __repr__(self) -> str:
        return f"PlacementGroup({self._pg_id.hex()}, {self._bundles}, {self._strategy})"


def check_bundles(bundles: Any) -> list[dict[str, float]]:
    """Check ``placement_group(bundles=...)``; returns the bundles as float dicts without
    zero amounts.

    Raises:
        TypeError: not a list of dicts, or a resource name that is not a str.
        ValueError: no bundles; a bundle that is empty or holds only zeros; an amount that
            is negative, not finite, above 1e9, or a fraction above 1 that is not whole.
    """
    if (
        isinstance(bundles, Mapping)
        or not isinstance(bundles, Sequence)
        or isinstance(bundles, (str, bytes))
    ):
        raise TypeError(
            "bundles must be a list of resource dicts, e.g. [{'CPU': 1}, {'CPU': 1, 'GPU': 1}], "
            f"got {type(bundles).__name__}"
        )
    if not bundles:
        raise ValueError("bundles must not be empty: give at least one, e.g. [{'CPU': 1}]")
    out = []
    for i, bundle in enumerate(bundles):
        if not isinstance(bundle, Mapping):
            raise TypeError(f"bundle {i} must be a dict of {{name: amount}}, got {bundle!r}")
        clean: dict[str, float] = {}
        for name, amount in bundle.items():
            if not isinstance(name, str) or not name.strip():
                raise TypeError(f"bundle {i}: resource names must be non-empty str, got {name!r}")
            ok = isinstance(amount, (int, float)) and not isinstance(amount, bool)
            if not ok or not math.isfinite(amount) or not 0 <= amount <= MAX_AMOUNT:
                raise ValueError(
                    f"bundle {i}: {name} must be a number from 0 to {MAX_AMOUNT:g}, got {amount!r}"
                )
            if amount > 1 and float(amount) != int(amount):
                raise ValueError(f"bundle {i}: {name} above 1 must be whole, got {amount}")
            if amount > 0:
                clean[name] = float(amount)
        if not clean:
            raise ValueError(
                f"bundle {i} reserves nothing ({dict(bundle)!r}): every bundle needs a "
                "resource amount above 0, e.g. {'CPU': 1}"
            )
        out.append(clean)
    return out


def check_strategy(strategy: Any) -> str:
    """Check ``strategy=``.

    Raises:
        ValueError: not one of PACK, SPREAD, STRICT_PACK, STRICT_SPREAD.
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {', '.join(STRATEGIES)}, got {strategy!r}")
    return str(strategy)


def check_lifetime(lifetime: Any) -> bool:
    """Check ``lifetime=`` (None or ``"detached"``); True when detached.

    Raises:
        ValueError: another value.
    """
    if lifetime not in (None, DETACHED):
        raise ValueError(
            f"lifetime must be None (removed with its job) or 'detached', got {lifetime!r}"
        )
    return lifetime == DETACHED


def group_resource(name: str, pg_hex: str, index: int = -1) -> str:
    """The renamed resource: ``<name>_group_<index>_<pg>``, or ``<name>_group_<pg>`` for
    index -1."""
    return f"{name}_group_{pg_hex}" if index < 0 else f"{name}_group_{index}_{pg_hex}"


def group_of(name: str) -> str | None:
    """The group id (hex) of a name :func:`group_resource` made, or None for any other
    resource name (a user's own ``my_group_x`` included)."""
    plain, sep, rest = name.rpartition("_group_")
    index, _, pg_hex = rest.rpartition("_")
    if not plain or not sep or (index and not index.isdigit()):
        return None
    return pg_hex if _is_pg_hex(pg_hex) else None


def is_group_resource(name: str) -> bool:
    """True for a name :func:`group_resource` makes."""
    return group_of(name) is not None


def committed_resources(pg_hex: str, index: int, bundle: Mapping[str, float]) -> dict[str, float]:
    """What a committed bundle adds to its node's totals (the renamed resources)."""
    out: dict[str, float] = {}
    for name, amount in {**bundle, "bundle": BUNDLE_UNIT}.items():
        out[group_resource(name, pg_hex, index)] = amount
        out[group_resource(name, pg_hex)] = amount
    return out


def node_totals(
    base: Mapping[str, float], held: Iterable[tuple[bytes, int, Mapping[str, float], bool]]
) -> dict[str, float]:
    """A node's totals with bundles held on it: ``base`` less every held bundle, plus the
    renamed resources of the committed ones (group-wide names summed over bundles).

    Args:
        base: the node's own totals.
        held: ``(pg_id, index, resources, committed)`` per bundle held there.
    """
    out = dict(base)
    for pg_id, index, resources, committed in held:
        for k, v in resources.items():
            out[k] = out.get(k, 0.0) - v
        if committed:
            for k, v in {**resources, "bundle": BUNDLE_UNIT}.items():
                out[group_resource(k, pg_id.hex(), index)] = v
                wide = group_resource(k, pg_id.hex())
                out[wide] = out.get(wide, 0.0) + v
    return {k: max(0.0, v) for k, v in out.items() if v > 1e-9 or k in base}


def with_reserved(totals: Mapping[str, float]) -> dict[str, float]:
    """Totals as Ray reports them (``cluster_resources()``): the plain resources that
    committed bundles reserved counted back in (a node's own totals hold them only under
    the group names), so a reservation shows as resources in use, not as a smaller
    cluster. Reads the group-wide names (``CPU_group_<pg>``) of ``totals``."""
    out = dict(totals)
    for name, amount in totals.items():
        plain, _, rest = name.rpartition("_group_")
        if plain and plain != "bundle" and _is_pg_hex(rest):  # group-wide names only
            out[plain] = out.get(plain, 0.0) + amount
    return out


def _is_pg_hex(text: str) -> bool:
    try:
        return len(bytes.fromhex(text)) >= 8
    except ValueError:
        return False


def bundle_demand(demand: Mapping[str, float], ref: GroupRef) -> dict[str, float]:
    """The demand of work placed in ``ref``'s bundle: every amount renamed, plus a share
    of the bundle's ``bundle_group_*`` resource.

    Raises:
        ValueError: the bundle index is out of range, or the demand can never fit in the
            bundle (index -1: in any bundle); the message names both.
    """
    n = len(ref.bundles)
    if not -1 <= ref.bundle_index < n:
        raise ValueError(
            f"placement_group_bundle_index {ref.bundle_index} is out of range: the group has "
            f"{n} bundle(s), so use -1 (any) or 0..{n - 1}"
        )
    chosen = ref.bundles if ref.bundle_index < 0 else [ref.bundles[ref.bundle_index]]
    if not any(all(b.get(k, 0.0) >= v for k, v in demand.items() if v > 0) for b in chosen):
        where = "any bundle" if ref.bundle_index < 0 else f"bundle {ref.bundle_index}"
        raise ValueError(
            f"the demand {dict(demand)} can never fit in {where} of placement group "
            f"{ref.pg_id.hex()} (bundles {[dict(b) for b in ref.bundles]}): ask for less, or "
            "create the group with larger bundles"
        )
    pg_hex = ref.pg_id.hex()
    out = {group_resource(k, pg_hex, ref.bundle_index): v for k, v in demand.items() if v > 0}
    out[group_resource("bundle", pg_hex, ref.bundle_index)] = _WORK_SHARE
    return out
