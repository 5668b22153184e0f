"""The dashboard's Tune page: the experiments the drivers published, their trials and
a live plot of each trial's metric against time.

rayfield-tune declares it as the entry point ``tune`` of the group
``rayfield.dashboard_pages`` (see :mod:`rayfield.dashboard.pages`), so a dashboard
started where rayfield-tune is installed shows a "Tune" tab; neither package imports
the other's code for it. The data comes from the GCS key-value store, where
:class:`rayfield.tune.dashboard.DashboardPublisher` writes it.

``GET /api/pages/tune`` answers ``{"experiments": [index records, newest first],
"experiment": the chosen record or null}``; ``?experiment=<id>`` chooses one (default:
the newest).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from importlib import resources
from typing import Any

from rayfield.dashboard.pages import DashboardPage
from rayfield.tune.dashboard import INDEX_PREFIX, KV_NAMESPACE, MAX_EXPERIMENTS, RECORD_PREFIX

__all__ = ["PAGE", "page_data"]

_ID = re.compile(r"\d{15}-\d{1,10}")


def page_data(client: Any, query: Mapping[str, str]) -> dict[str, Any]:
    """What the Tune page draws (see the module docstring).

    Args:
        client: the dashboard's ``rayfield.util.state.StateClient`` (``kv_keys``,
            ``kv_get``).
        query: the request's query; ``experiment`` picks an experiment by id.

    Raises:
        ValueError: ``experiment`` is malformed or names no published experiment.
    """
    chosen = query.get("experiment") or None
    if chosen is not None and not _ID.fullmatch(chosen):
        raise ValueError(
            f"experiment must be an experiment id such as 001764140000000-123, not {chosen!r}"
        )
    ids = sorted(
        k.decode()[len(INDEX_PREFIX) :] for k in client.kv_keys(KV_NAMESPACE, INDEX_PREFIX)
    )
    experiments = []
    for exp_id in reversed(ids[-MAX_EXPERIMENTS:]):
        raw = client.kv_get(KV_NAMESPACE, INDEX_PREFIX + exp_id)
        if raw:
            experiments.append(json.loads(raw))
    if chosen is None and experiments:
        chosen = experiments[0]["id"]
    record = None
    if chosen is not None:
        raw = client.kv_get(KV_NAMESPACE, RECORD_PREFIX + chosen)
        if raw is None:
            raise ValueError(f"no Tune experiment {chosen} was published to this cluster")
        record = json.loads(raw)
    return {"experiments": experiments, "experiment": record}


def _script() -> str:
    return resources.files("rayfield.tune").joinpath("static/dashboard_page.js").read_text()


PAGE = DashboardPage("tune", "Tune", _script(), page_data)
"""The page, as the ``rayfield.dashboard_pages`` entry point names it."""
