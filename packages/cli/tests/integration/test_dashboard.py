"""The dashboard end to end: a two-node cluster started by the CLI with
``--include-dashboard``, a driver's workload, then headless Chromium (Playwright) and
plain HTTP against the real server.

The browser is the system Chromium that ``tools/install_browser.py`` finds or installs;
without one these tests fail with the install hint.
"""

from __future__ import annotations

import http.client
import json
import os
import runpy
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import numpy as np
import psutil
import pytest
from clusterutil import rayfield_cmd, start_nodes, stop_in_background
from playwright.sync_api import Browser, Page

import rayfield as rf
from rayfield.testing import wait_for
from rayfield.util.state import StateClient

TOOL = Path(__file__).resolve().parents[4] / "tools" / "install_browser.py"


def fmt_bytes(n: float) -> str:
    """The page's byte format (app.js ``fmtBytes``)."""
    units = ["B", "KiB", "MiB", "GiB", "TiB"]
    i = 0
    while n >= 1024 and i < len(units) - 1:
        n /= 1024
        i += 1
    return f"{int(n)} B" if i == 0 else f"{n:.1f} {units[i]}"


@rf.remote
def on_head(x: int) -> int:
    print(f"on_head says {x}")
    return x + 1


@rf.remote(resources={"b": 1})
def on_b(x: int) -> int:
    return x * 2


@rf.remote(resources={"b": 1}, num_cpus=0)
class Counter:
    def __init__(self) -> None:
        print("Counter is up")
        self.n = 0

    def tick(self) -> int:
        self.n += 1
        print(f"tick {self.n}")
        return os.getpid()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    temp_dir = tmp_path_factory.mktemp("rf")
    address = start_nodes(
        temp_dir,
        resources='{"b": 4}',
        head_args=("--include-dashboard", "--dashboard-port", "0"),
    )
    session = (temp_dir / "session_latest").resolve()
    info = json.loads((session / "dashboard.json").read_text())
    rf.init(address=address, temp_dir=str(temp_dir))
    client = StateClient(address, temp_dir=temp_dir)
    try:
        yield {
            "address": address,
            "temp_dir": temp_dir,
            "url": info["url"],
            "pid": info["pid"],
            "session": session,
            "token": (session / "token").read_text().strip(),
            "state": client,
        }
    finally:
        client.close()
        rf.shutdown()
        stop_in_background(temp_dir)


@pytest.fixture(scope="module")
def workload(cluster: dict[str, Any]) -> dict[str, Any]:
    counter = Counter.remote()  # type: ignore[attr-defined]
    actor_pid = rf.get(counter.tick.remote())
    kept = rf.put(np.zeros(500_000))  # 4 MB, held by this driver
    assert rf.get([on_head.remote(i) for i in range(3)]) == [1, 2, 3]
    assert rf.get([on_b.remote(i) for i in range(2)]) == [0, 2]
    state: StateClient = cluster["state"]
    wait_for(
        lambda: (
            {"on_head", "on_b", "Counter.__init__"}
            <= {t["name"] for t in state.tasks() if t["state"] == "FINISHED"}
        ),
        20,
        "the task events of both nodes in the GCS",
        interval=0.2,
    )
    return {"counter": counter, "actor_pid": actor_pid, "kept": kept}


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Headless Chromium (tools/install_browser.py finds it), closed after the module."""
    with runpy.run_path(str(TOOL))["headless_chromium"]() as chromium:
        yield chromium


def log_in(browser: Browser, url: str, token: str) -> Page:
    page = browser.new_context().new_page()
    page.goto(url)
    assert page.url == url + "login"  # every page sends a stranger to the login first
    page.fill("#token", token)
    page.click("button[type=submit]")
    page.wait_for_url(url)
    return page


@pytest.fixture(scope="module")
def page(browser: Browser, cluster: dict[str, Any], workload: dict[str, Any]) -> Page:
    return log_in(browser, cluster["url"], cluster["token"])


def show(page: Page, tab: str) -> None:
    page.evaluate(f"window.location.hash = '#{tab}'")
    page.wait_for_selector(f"#tab-{tab}:not([hidden])")


# ---- the browser -----------------------------------------------------------------------


def test_login_without_the_token_is_refused(browser: Browser, cluster: dict[str, Any]) -> None:
    url = cluster["url"]
    context = browser.new_context()
    page = context.new_page()
    page.goto(url + "api/../#nodes")
    assert page.url.split("#")[0] == url + "login"
    page.fill("#token", "0" * 64)
    page.click("button[type=submit]")
    page.wait_for_selector("#login-error")
    assert page.url == url + "login"
    assert context.cookies() == []
    assert context.request.get(url + "api/nodes").status == 401
    page.goto(url)
    assert page.url == url + "login"
    context.close()


def test_nodes_page_matches_the_cluster(page: Page, cluster: dict[str, Any]) -> None:
    show(page, "nodes")
    state: StateClient = cluster["state"]

    def shown_and_expected() -> bool:
        for n in state.nodes():
            row = page.locator(f'#nodes-table tr[data-node="{n["address"]}"]')
            if row.count() != 1:
                return False
            cells = {c: row.locator(f".c-{c}").inner_text().strip() for c in ("state", "memory")}
            cells["store"] = row.locator(".c-store").inner_text().strip()
            cells["resources"] = row.locator(".c-resources").inner_text().strip()
            expected_store = f"{fmt_bytes(n['store_used'])} / {fmt_bytes(n['store_capacity'])}"
            if cells["state"] != "alive" or cells["store"] != expected_store:
                return False
            assert cells["memory"].endswith(f"/ {fmt_bytes(n['memory_total'])}")
            for name, total in n["resources_total"].items():
                assert f"{name} " in cells["resources"] and f"/{total:g}" in cells["resources"]
        return True

    wait_for(
        shown_and_expected,
        20,
        "the nodes table to show what StateClient.nodes() says",
        interval=0.2,
    )
    assert page.locator("#nodes-table tbody tr").count() == 2
    assert page.inner_text("#summary").startswith("2 nodes alive")


def test_actors_tasks_and_objects_pages(
    page: Page, cluster: dict[str, Any], workload: dict[str, Any]
) -> None:
    show(page, "actors")
    row = page.locator("#actors-table tr", has_text="Counter")
    row.locator(".c-state", has_text="ALIVE").wait_for()
    assert row.locator(".c-pid").inner_text() == str(workload["actor_pid"])

    show(page, "jobs")
    job = page.locator(f'#jobs-table tr[data-job="{rf.get_runtime_context().job_id}"]')
    job.locator(".c-state", has_text="RUNNING").wait_for()
    assert job.locator(".c-pid").inner_text() == str(os.getpid())

    show(page, "tasks")
    page.locator("#tasks-table .c-name", has_text="on_b").first.wait_for()
    names = set(page.locator("#tasks-table .c-name").all_inner_texts())
    assert {"on_head", "on_b", "Counter.__init__", "Counter.tick"} <= names

    show(page, "objects")
    kept = page.locator(f'#objects-table tr[data-object="{workload["kept"].hex()}"]')
    kept.wait_for()
    assert kept.locator(".c-owner").inner_text() == str(os.getpid())
    [obj] = [o for o in cluster["state"].objects() if o["object_id"] == workload["kept"].hex()]
    assert kept.locator(".c-size").inner_text() == fmt_bytes(obj["size_bytes"])


def test_logs_page_shows_and_follows_a_worker_log(
    page: Page, cluster: dict[str, Any], workload: dict[str, Any]
) -> None:
    b_node = next(n for n in cluster["state"].nodes() if "b" in n["resources_total"])
    show(page, "logs")
    name = f"worker-{workload['actor_pid']}.out"
    button = page.locator(f'#log-files button[data-node="{b_node["address"]}"][data-name="{name}"]')
    button.click()
    page.locator("#log-view", has_text="Counter is up").wait_for()
    rf.get(workload["counter"].tick.remote())  # prints "tick 2"
    page.locator("#log-view", has_text="tick 2").wait_for(timeout=20_000)


def test_timeline_draws_spans_per_node(page: Page, cluster: dict[str, Any]) -> None:
    show(page, "timeline")
    page.locator("#timeline svg rect.span").first.wait_for()
    labels = " ".join(page.locator("#timeline svg text.row-label").all_text_contents())
    for n in cluster["state"].nodes():
        assert n["address"].split(":")[0] in labels
    assert {"on_head", "on_b"} <= set(
        page.locator("#timeline svg rect.span").evaluate_all("rs => rs.map(r => r.dataset.name)")
    )
    href = page.get_attribute("#timeline-download", "href")
    assert href is not None
    trace = page.context.request.get(cluster["url"] + href.lstrip("/")).json()
    assert any(e["name"] == "on_b" for e in trace)


def test_metrics_page_plots_every_node(page: Page, cluster: dict[str, Any]) -> None:
    show(page, "metrics")
    nodes = {n["address"] for n in cluster["state"].nodes()}
    lines = 'svg.metrics-chart[data-series="cpu_percent"] polyline'
    # a line per node, drawn through two samples or more (the dashboard samples every 5 s)
    page.wait_for_function(
        f"""() => {{
          const ls = [...document.querySelectorAll('{lines}')];
          return ls.length === {len(nodes)} &&
            ls.every(l => l.getAttribute("points").trim().split(" ").length >= 2);
        }}""",
        timeout=30_000,
    )
    drawn = page.locator(lines).evaluate_all("ls => ls.map(l => l.dataset.node)")
    assert set(drawn) == nodes
    titles = page.locator("#tab-metrics .metrics-card h3").all_text_contents()
    assert any(t.startswith("Tasks running") for t in titles)
    assert any(t.startswith("Object store used") for t in titles)


def test_page_updates_without_reload(page: Page, cluster: dict[str, Any]) -> None:
    show(page, "tasks")
    finished = page.locator('#task-counts .count[data-state="FINISHED"]')
    finished.wait_for()
    before = int(finished.inner_text())
    page.evaluate("window.__loaded_once = true")
    assert rf.get([on_head.remote(i) for i in range(5)]) == [1, 2, 3, 4, 5]
    wait_for(
        lambda: int(finished.inner_text()) >= before + 5,
        20,
        "the finished count to grow",
        interval=0.2,
    )
    assert page.evaluate("window.__loaded_once") is True  # the same page, never reloaded


# ---- plain HTTP --------------------------------------------------------------------------


def request(
    url: str, method: str = "GET", path: str = "/", body: str | None = None, **headers: str
) -> http.client.HTTPResponse:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=10)
    headers.setdefault("Host", parts.netloc)
    if body is not None:
        headers.setdefault("Content-Type", "application/x-www-form-urlencoded")
    conn.request(
        method, path, body=body, headers={k.replace("_", "-"): v for k, v in headers.items()}
    )
    reply = conn.getresponse()
    reply.read()
    conn.close()
    return reply


def test_host_origin_and_token_checks(cluster: dict[str, Any]) -> None:
    url, token = cluster["url"], cluster["token"]
    port = urlsplit(url).port
    # DNS rebinding: another name for this address is refused, on every path.
    for path in ("/login", "/api/nodes", "/"):
        assert request(url, path=path, Host=f"evil.example:{port}").status == 421
    assert request(url, path="/login", Host="localhost:1").status == 421
    assert request(url, path="/login", Host=f"localhost:{port}").status == 200
    # Cross-site form posts are refused even with the right token; no session is made.
    login = f"token={token}"
    for origin in ("http://evil.example", f"http://localhost:{port + 1}"):
        refused = request(url, "POST", "/login", login, Origin=origin)
        assert refused.status == 403 and refused.getheader("Set-Cookie") is None
    assert request(url, "POST", "/login", login).status == 403  # no Origin at all
    same = url.rstrip("/")
    ok = request(url, "POST", "/login", login, Origin=same)
    assert ok.status == 303 and ok.getheader("Location") == "/"
    cookie = ok.getheader("Set-Cookie") or ""
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    assert request(url, "POST", "/login", "token=wrong", Origin=same).status == 401
    # The API: 401 without a session or token, 200 with either.
    assert request(url, path="/api/nodes").status == 401
    assert request(url, path="/api/nodes", Authorization="Bearer " + "0" * 64).status == 401
    assert request(url, path="/api/nodes", Authorization=f"Bearer {token}").status == 200
    session = cookie.split(";")[0]
    assert request(url, path="/api/actors", Cookie=session).status == 200
    assert request(url, path="/", Cookie=session).status == 200
    name = session.split("=")[0]
    assert name.startswith("rayfield_session_")
    assert request(url, path="/", Cookie=f"{name}=forged").status == 303
    reply = request(url, path="/api/nodes", Cookie=session)
    assert "frame-ancestors 'none'" in (reply.getheader("Content-Security-Policy") or "")
    # Log files: bare names of the node's logs only.
    node = cluster["state"].nodes()[0]["address"]
    for name in ("../token", "/etc/passwd", "..token", ""):
        bad = request(url, path=f"/api/log?node={node}&name={name}", Cookie=session)
        assert bad.status == 400, name
    assert request(url, path="/api/log?node=10.9.9.9:1&name=node.out", Cookie=session).status == 400


def test_listens_on_loopback_only(cluster: dict[str, Any]) -> None:
    proc = psutil.Process(cluster["pid"])
    listening = [c.laddr for c in proc.net_connections("inet") if c.status == psutil.CONN_LISTEN]
    assert listening and all(a.ip == "127.0.0.1" for a in listening)
    port = urlsplit(cluster["url"]).port
    others = [
        a.address
        for addrs in psutil.net_if_addrs().values()
        for a in addrs
        if a.family == socket.AF_INET and not a.address.startswith("127.")
    ]
    for ip in others:
        with pytest.raises(OSError), socket.create_connection((ip, port), timeout=2):
            pass


def test_dashboard_command_prints_the_url(cluster: dict[str, Any]) -> None:
    temp = str(cluster["temp_dir"])
    assert rayfield_cmd("dashboard", "--temp-dir", temp).stdout.strip() == cluster["url"]
    by_address = rayfield_cmd("dashboard", "--address", cluster["address"], "--temp-dir", temp)
    assert by_address.stdout.strip() == cluster["url"]


def test_stop_stops_the_dashboard(cluster: dict[str, Any], tmp_path: Path) -> None:
    rf.shutdown()
    rayfield_cmd("stop", "--temp-dir", str(cluster["temp_dir"]))
    try:
        assert psutil.Process(cluster["pid"]).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        pass
    assert not (cluster["session"] / "dashboard.json").exists()
    missing = rayfield_cmd("dashboard", "--temp-dir", str(cluster["temp_dir"]), check=False)
    assert missing.returncode != 0 and "--include-dashboard" in missing.stderr
    empty = rayfield_cmd("dashboard", "--temp-dir", str(tmp_path), check=False)
    assert empty.returncode != 0 and "rayfield start --head --include-dashboard" in empty.stderr
