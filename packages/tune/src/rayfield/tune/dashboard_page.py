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

    Index records that are malformed (a key that is not an experiment id, a value that is
    not a JSON object with that ``id``) are left out: anyone who can write the cluster's
    key-value store can put one there.

    Raises:
        ValueError: ``experiment`` is malformed, names no published experiment, or its
            record is not a JSON object (the dashboard answers 400).
    """
    chosen = query.get("experiment") or None
    if chosen is not None and not _ID.fullmatch(chosen):
        raise ValueError(
            f"experiment must be an experiment id such as 001764140000000-123, not {chosen!r}"
        )
    ids = []
    for key in client.kv_keys(KV_NAMESPACE, INDEX_PREFIX):
        exp_id = key.decode("utf-8", "replace")[len(INDEX_PREFIX) :]
        if _ID.fullmatch(exp_id):
            ids.append(exp_id)
    experiments = []
    for exp_id in reversed(sorted(ids)[-MAX_EXPERIMENTS:]):
        index = _json_object(client.kv_get(KV_NAMESPACE, INDEX_PREFIX + exp_id))
        if index is not None and index.get("id") == exp_id:
            experiments.append(index)
    if chosen is None and experiments:
        chosen = experiments[0]["id"]
    record = None
    if chosen is not None:
        raw = client.kv_get(KV_NAMESPACE, RECORD_PREFIX + chosen)
        if raw is None:
            raise ValueError(f"no Tune experiment {chosen} was published to this cluster")
        record = _json_object(raw)
        if record is None or not isinstance(record.get("trials", []), list):
            raise ValueError(f"the record of Tune experiment {chosen} is malformed")
    return {"experiments": experiments, "experiment": record}


def _json_object(raw: bytes | None) -> dict[str, Any] | None:
    """``raw`` as a JSON object, or None when it is missing, not JSON or not an object."""
    if not raw:
        return None
    try:
        value = json.loads(raw)
    except ValueError:  # not UTF-8 or not JSON
        return None
    return value if isinstance(value, dict) else None


def _script() -> str:
    return resources.files("rayfield.tune").joinpath("static/dashboard_page.js").read_text()


PAGE = DashboardPage("tune", "Tune", _script(), page_data)
"""The page, as the ``rayfield.dashboard_pages`` entry point names it."""
