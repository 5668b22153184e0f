"""Dashboard pages of other packages: discovery through entry points, and the routes the
dashboard serves for them (an in-process aiohttp server, no cluster)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

import pytest

pytest.importorskip("aiohttp")  # the dashboard extra, part of the test extra

from aiohttp.test_utils import TestClient, TestServer

from rayfield.dashboard import pages
from rayfield.dashboard.api import StateApi
from rayfield.dashboard.pages import DashboardPage, PageError, discover
from rayfield.dashboard.server import ALLOWED_HOSTS, make_app
from rayfield.util.state import GcsUnavailableError

TOKEN = "ab" * 32


class Client:
    """Stands in for the dashboard's StateClient."""

    label = "the dashboard's state client"

    def __getattr__(self, name: str) -> Any:  # the built-in routes, unused here
        return lambda *a: []


class FakeEntryPoint:
    def __init__(self, name: str, value: Any) -> None:
        self.name, self.value = name, value

    def load(self) -> Any:
        if isinstance(self.value, Exception):
            raise self.value
        return self.value


def page(name: str, data: Any = None) -> DashboardPage:
    return DashboardPage(name, name.title(), f"/* {name} */", data or (lambda c, q: {}))


@pytest.mark.parametrize("name", ["", "Tune", "9lives", "a b", "x" * 33, "tasks", "nodes", "ü"])
def test_bad_names_are_refused(name: str) -> None:
    with pytest.raises(PageError, match=repr(name)):
        page(name)


def test_title_script_and_data_are_checked() -> None:
    with pytest.raises(PageError, match="needs a title"):
        DashboardPage("a", "", "", lambda c, q: 1)
    with pytest.raises(PageError, match="script over"):
        DashboardPage("a", "A", "x" * (pages.MAX_SCRIPT_BYTES + 1), lambda c, q: 1)
    with pytest.raises(PageError, match="data must be callable"):
        DashboardPage("a", "A", "", 3)  # type: ignore[arg-type]


def test_discover_keeps_good_pages_and_logs_the_rest(caplog: pytest.LogCaptureFixture) -> None:
    found = discover(
        [
            FakeEntryPoint("zeta", page("zeta")),
            FakeEntryPoint("alpha", lambda: page("alpha")),  # a factory
            FakeEntryPoint("broken", ImportError("no module named nowhere")),
            FakeEntryPoint("wrong", 42),
            FakeEntryPoint("again", page("zeta")),
        ]
    )
    assert [p.name for p in found] == ["alpha", "zeta"]
    warnings = " | ".join(r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    assert "'broken' is left out: no module named nowhere" in warnings
    assert "'wrong' is left out: it gave a int, not a DashboardPage" in warnings
    assert "'again' is left out: another page is already named 'zeta'" in warnings


def test_discover_reads_the_entry_point_group(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[str] = []

    def entry_points(group: str) -> list[FakeEntryPoint]:
        asked.append(group)
        return [FakeEntryPoint("q", page("q"))]

    monkeypatch.setattr(pages.metadata, "entry_points", entry_points)
    assert [p.name for p in discover()] == ["q"]
    assert asked == ["rayfield.dashboard_pages"]


def serve(app_pages: list[DashboardPage], client: Any, check: Any) -> None:
    """Run ``check(http)`` against a dashboard app with ``app_pages``, in this thread."""

    async def main() -> None:
        api = StateApi(client)
        app = make_app(api, TOKEN, (), app_pages)
        server = TestServer(app, host="127.0.0.1")
        await server.start_server()
        app[ALLOWED_HOSTS].add(f"127.0.0.1:{server.port}")
        http = TestClient(server)
        try:
            await check(http)
        finally:
            await http.close()
            api.close()

    asyncio.run(main())


def test_the_pages_routes() -> None:
    seen: list[tuple[Any, Mapping[str, str]]] = []

    def queue_data(client: Any, query: Mapping[str, str]) -> Any:
        seen.append((client, query))
        if query.get("bad"):
            raise ValueError("bad must not be given")
        if query.get("down"):
            raise GcsUnavailableError("the GCS is gone")
        return {"items": [1, 2], "client": client.label}

    client = Client()
    queue = DashboardPage(
        "queue", "Queue", "rayfieldDashboard.addPage('queue', () => {});", queue_data
    )
    auth = {"Authorization": f"Bearer {TOKEN}"}

    async def check(http: TestClient) -> None:
        listing = await http.get("/api/pages", headers=auth)
        assert listing.status == 200
        assert await listing.json() == [{"name": "queue", "title": "Queue"}]
        assert (await http.get("/api/pages")).status == 401  # logged in only
        assert (await http.get("/api/pages/queue")).status == 401
        data = await http.get("/api/pages/queue?x=1", headers=auth)
        assert await data.json() == {"items": [1, 2], "client": client.label}
        assert seen[-1] == (client, {"x": "1"})
        bad = await http.get("/api/pages/queue?bad=1", headers=auth)
        assert bad.status == 400 and (await bad.json())["error"] == "bad must not be given"
        down = await http.get("/api/pages/queue?down=1", headers=auth)
        assert down.status == 502 and "the GCS is gone" in (await down.json())["error"]
        missing = await http.get("/api/pages/nothing", headers=auth)
        assert missing.status == 404 and "'nothing'" in (await missing.json())["error"]
        script = await http.get("/static/pages/queue.js")  # public, like app.js
        assert script.status == 200 and script.content_type == "text/javascript"
        assert await script.text() == queue.script
        assert (await http.get("/static/pages/other.js")).status == 404
        assert (await http.get("/static/app.js")).status == 200  # the own files still served

    serve([queue], client, check)


def test_no_pages_gives_an_empty_list() -> None:
    async def check(http: TestClient) -> None:
        reply = await http.get("/api/pages", headers={"Authorization": f"Bearer {TOKEN}"})
        assert await reply.json() == []

    serve([], Client(), check)
