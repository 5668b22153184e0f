"""``list_named_actors``: the live actors that have a name (Ray's
``ray.util.list_named_actors``)."""

from __future__ import annotations

from typing import Any

__all__ = ["list_named_actors"]


def list_named_actors(all_namespaces: bool = False) -> list[Any]:
    """The names of the live (not DEAD) named actors of this driver's cluster or node.

    Args:
        all_namespaces: False: the names (``str``) of those in the job's namespace; True:
            every namespace's, as ``{"name": ..., "namespace": ...}`` dicts.

    Returns:
        A list of names, or of name/namespace dicts, sorted.

    Raises:
        RayfieldError: rayfield is not initialized.
        rayfield.util.state.StateError: the cluster's GCS cannot be found.
    """
    import rayfield
    from rayfield.util import state

    rayfield.get_runtime_context()  # raises RayfieldError when not initialized
    named = sorted(
        {
            (a["namespace"], a["name"])
            for a in state.list_actors()
            if a["name"] and a["state"] != "DEAD"
        }
    )
    if all_namespaces:
        return [{"name": name, "namespace": ns} for ns, name in named]
    mine = rayfield.get_runtime_context().namespace
    return [name for ns, name in named if ns == mine]
