"""The dashboard's JSON API: ``/api/...`` handlers over ``StateClient``.

Every handler runs the (blocking, gRPC) ``StateClient`` call on a thread pool, so the
event loop keeps serving while nodes answer. Replies are JSON; a cluster that cannot
answer gives 502 and a bad request 400 (query parameters are checked by ``query.py``),
each with ``{"error": message}``.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from aiohttp import web

from rayfield.dashboard import query
from rayfield.dashboard.pages import DashboardPage
from rayfield.util.state import GcsError, NodeCallError, StateClient, StateError, call_status

__all__ = ["StateApi"]

T = TypeVar("T")
RECENT_TASKS = 200
TIMELINE_EVENTS = 20_000  # task events drawn by the timeline page (the newest)
LOG_TAIL_BYTES = 64 << 10
LOG_MAX_BYTES = 1 << 20
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _json(value: Any, headers: dict[str, str] | None = None) -> web.Response:
    return web.json_response(value, headers=headers, dumps=lambda v: json.dumps(v, default=str))


def _checked(handler: Handler) -> Handler:
    """``handler``, with a malformed or out-of-range query parameter answered by 400."""

    async def wrapped(request: web.Request) -> web.StreamResponse:
        try:
            return await handler(request)
        except query.QueryError as exc:
            raise _error(web.HTTPBadRequest, str(exc)) from None

    return wrapped


def tasks_summary(tasks: list[dict[str, Any]], recent: int = RECENT_TASKS) -> dict[str, Any]:
    """Counts of ``tasks`` by state, and the running ones plus the newest finished ones."""
    counts = Counter(t["state"] for t in tasks)
    running = [t for t in tasks if t["state"] == "RUNNING"]
    done = sorted(
        (t for t in tasks if t["state"] != "RUNNING"),
        key=lambda t: t.get("end_s") or 0,
        reverse=True,
    )
    return {"counts": dict(counts), "total": len(tasks), "recent": running + done[:recent]}


class StateApi:
    """The ``/api`` routes of one dashboard.

    Args:
        client: queries the cluster (owned by the caller, closed by it).
        workers: threads running blocking ``StateClient`` calls.
    """

    def __init__(self, client: StateClient, workers: int = 4) -> None:
        self.client = client
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="rf-dashboard")

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def routes(self) -> list[web.RouteDef]:
        """GET routes: nodes, actors, jobs, tasks, objects, workers, logs, log, timeline."""
        return [
            web.get("/api/nodes", self._plain(self.client.nodes)),
            web.get("/api/actors", self._plain(self.client.actors)),
            web.get("/api/jobs", self._plain(self.client.jobs)),
            web.get("/api/workers", self._plain(self.client.workers)),
            web.get("/api/objects", self._plain(self.client.objects)),
            web.get("/api/logs", self._plain(self.client.logs)),
            web.get("/api/tasks", _checked(self.tasks)),
            web.get("/api/log", _checked(self.log)),
            web.get("/api/timeline", _checked(self.timeline)),
        ]

    def page_routes(self, pages: Sequence[DashboardPage]) -> list[web.RouteDef]:
        """GET ``/api/pages`` (the list) and ``/api/pages/<name>`` (a page's data); see
        :mod:`rayfield.dashboard.pages`."""
        listing = [{"name": p.name, "title": p.title} for p in pages]
        by_name = {p.name: p for p in pages}

        async def index(request: web.Request) -> web.Response:
            return _json(listing)

        async def data(request: web.Request) -> web.Response:
            name = request.match_info["name"]
            page = by_name.get(name)
            if page is None:
                raise _error(web.HTTPNotFound, f"no dashboard page is named {name!r}")
            try:
                value = await self.run(page.data, self.client, dict(request.query))
            except ValueError as exc:
                raise _error(web.HTTPBadRequest, str(exc)) from None
            return _json(value)

        return [web.get("/api/pages", index), web.get("/api/pages/{name}", data)]

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on the pool; cluster errors become 400 or 502 replies."""
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._pool, fn, *args)
        except StateError as exc:
            raise _error(web.HTTPBadRequest, str(exc)) from None
        except NodeCallError as exc:
            code, details = call_status(exc)
            if code == "INVALID_ARGUMENT":
                raise _error(web.HTTPBadRequest, details) from None
            raise _error(web.HTTPBadGateway, f"{code}: {details}") from None
        except GcsError as exc:
            raise _error(web.HTTPBadGateway, f"the GCS did not answer: {exc}") from None

    def _plain(self, fn: Callable[[], list[dict[str, Any]]]) -> Handler:
        async def handler(request: web.Request) -> web.Response:
            return _json(await self.run(fn))

        return handler

    async def tasks(self, request: web.Request) -> web.Response:
        """Counts by state and the recent tasks (``?recent=N``, default 200)."""
        recent = query.integer(request.query, "recent", RECENT_TASKS)
        return _json(tasks_summary(await self.run(self.client.tasks), recent))

    async def log(self, request: web.Request) -> web.Response:
        """Part of one log file: ``?node=ADDRESS&name=FILE&offset=N&max_bytes=N``.

        A negative offset counts from the end (the default shows the last 64 KiB); the
        reply's ``offset + len(data)`` is where to continue to follow the file. The node
        must be an alive node of the cluster; it serves bare file names of its logs only.
        """
        node, name = query.log_file(request.query)
        offset = query.integer(request.query, "offset", -LOG_TAIL_BYTES)
        max_bytes = min(query.integer(request.query, "max_bytes", LOG_MAX_BYTES), LOG_MAX_BYTES)

        def read() -> dict[str, Any]:
            address = self.client.resolve_node(node).address  # only nodes of this cluster
            return self.client.read_log(address, name, offset, max_bytes)

        reply = await self.run(read)
        data = bytes(reply["data"])
        return _json(
            {
                "node": node,
                "name": name,
                "found": reply["found"],
                "size": reply["size"],
                "offset": reply["offset"],
                "next_offset": reply["offset"] + len(data),
                "data": data.decode("utf-8", errors="replace"),
            }
        )

    async def timeline(self, request: web.Request) -> web.Response:
        """The task events as a Chrome trace (``?limit=N`` newest events; ``?download=1``
        serves it as ``timeline.json``)."""
        limit = query.integer(request.query, "limit", TIMELINE_EVENTS)
        download = query.flag(request.query, "download")
        trace = await self.run(self.client.timeline, limit)
        headers = {}
        if download:
            headers["Content-Disposition"] = 'attachment; filename="timeline.json"'
        return _json(trace, headers)


def _error(cls: type[web.HTTPException], message: str) -> web.HTTPException:
    return cls(text=json.dumps({"error": message}), content_type="application/json")
