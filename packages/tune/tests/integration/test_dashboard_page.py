"""The dashboard's Tune page end to end: a head started by the CLI with
``--include-dashboard`` (which finds rayfield-tune's page through its entry point), a
driver running ``tune.run`` with real trial actors, and headless Chromium (Playwright)
watching the trials' states and their metric plot change without a reload.

The browser is the system Chromium that ``tools/install_browser.py`` finds or installs;
without one this test fails with the install hint.
"""

from __future__ import annotations

import json
import os
import runpy
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("aiohttp")  # the dashboard extra of rayfield-core
from playwright.sync_api import Browser, Page

import rayfield
from rayfield import tune
from rayfield.testing import wait_for
from rayfield.tune.dashboard import INDEX_PREFIX, KV_NAMESPACE
from rayfield.util.state import StateClient

CLI = [sys.executable, "-m", "rayfield.cli.main"]
TOOL = Path(__file__).resolve().parents[4] / "tools" / "install_browser.py"


@pytest.fixture(scope="module")
def head(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A 2-CPU head with the dashboard; this driver connected to it."""
    temp_dir = tmp_path_factory.mktemp("rf")
    args = ["--port", "0", "--num-cpus", "2", "--temp-dir", str(temp_dir)]
    args += ["--include-dashboard", "--dashboard-port", "0"]
    subprocess.run([*CLI, "start", "--head", *args], check=True, capture_output=True, timeout=120)
    try:
        session = (temp_dir / "session_latest").resolve()
        address = json.loads((session / "cluster.json").read_text())["gcs_address"]
        info = json.loads((session / "dashboard.json").read_text())
        rayfield.init(address=address, temp_dir=str(temp_dir))
        try:
            token = (session / "token").read_text().strip()
            yield {"url": info["url"], "token": token, "address": address, "temp_dir": temp_dir}
        finally:
            rayfield.shutdown()
    finally:
        stop = [*CLI, "stop", "--temp-dir", str(temp_dir)]
        subprocess.run(stop, capture_output=True, timeout=120)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Headless Chromium (tools/install_browser.py finds it), closed after the module."""
    with runpy.run_path(str(TOOL))["headless_chromium"]() as chromium:
        yield chromium


def log_in(browser: Browser, url: str, token: str) -> Page:
    page = browser.new_context().new_page()
    page.goto(url)
    page.fill("#token", token)
    page.click("button[type=submit]")
    page.wait_for_url(url)
    return page


def until_released(config: dict[str, Any]) -> None:
    """Reports ``score = x * step`` every 50 ms until the release file exists."""
    for step in range(1, 2000):
        tune.report(score=config["x"] * step)
        if os.path.exists(config["release"]):
            return
        time.sleep(0.05)


def points(page: Page, trial_id: str) -> int:
    line = page.locator(f'#tune-chart polyline.trial-line[data-trial="{trial_id}"]')
    return int(line.get_attribute("data-points") or 0) if line.count() == 1 else 0


def test_the_tune_page_follows_an_experiment(
    head: dict[str, Any], browser: Browser, tmp_path: Path
) -> None:
    page = log_in(browser, head["url"], head["token"])
    page.locator('#tabs a[data-tab="tune"]', has_text="Tune").wait_for()
    page.evaluate("window.location.hash = '#tune'")
    page.wait_for_selector("#tab-tune:not([hidden])")
    page.locator("#tune-summary", has_text="No Tune experiment").wait_for()

    release = tmp_path / "release"
    outcome: dict[str, Any] = {}

    def drive() -> None:
        try:
            outcome["analysis"] = tune.run(
                until_released,
                name="dashboard-demo",
                config={"x": tune.grid_search([1.0, 2.0]), "release": str(release)},
                metric="score",
                mode="max",
                local_dir=str(tmp_path / "results"),
                verbose=0,
            )
        except BaseException as exc:
            outcome["error"] = exc

    driver = threading.Thread(target=drive)
    driver.start()
    try:
        rows = page.locator("#tune-trials tbody tr")
        running = page.locator("#tune-trials .c-status", has_text="RUNNING")
        wait_for(lambda: running.count() == 2, 60, "both trials RUNNING on the page", interval=0.2)
        page.locator("#tune-summary .c-name", has_text="dashboard-demo").wait_for()
        ids = rows.evaluate_all("rs => rs.map(r => r.dataset.trial)")
        assert len(ids) == 2
        page.evaluate("window.__not_reloaded = true")
        # The plot draws one line per trial and grows while they run.
        wait_for(
            lambda: all(points(page, i) >= 3 for i in ids), 20, "a line per trial", interval=0.2
        )
        before = {i: points(page, i) for i in ids}
        grown = lambda: all(points(page, i) > before[i] for i in ids)  # noqa: E731
        wait_for(grown, 30, "the lines to grow", interval=0.2)
        assert page.locator("#tune-metric").inner_text() == "score"
        values = page.locator("#tune-trials .c-value").all_inner_texts()
        assert all(float(v) > 0 for v in values)
    finally:
        release.touch()
        driver.join(timeout=60)
    assert "error" not in outcome, outcome.get("error")
    done = page.locator("#tune-trials .c-status", has_text="TERMINATED")
    wait_for(lambda: done.count() == 2, 20, "both trials TERMINATED on the page", interval=0.2)
    page.locator("#tune-summary", has_text="finished").wait_for()
    # What the page read: the GCS keys the driver wrote (StateClient.kv_keys, public API).
    with StateClient(head["address"], temp_dir=head["temp_dir"]) as client:
        keys = client.kv_keys(KV_NAMESPACE, INDEX_PREFIX)
        assert len(keys) == 1 and client.kv_keys(KV_NAMESPACE, "no-such-prefix/") == []
        shown = json.loads(client.kv_get(KV_NAMESPACE, keys[0]))
    assert shown["name"] == "dashboard-demo" and shown["counts"] == {"TERMINATED": 2}
    best = outcome["analysis"].get_best_trial("score", "max")
    assert f"({best})" in page.inner_text("#tune-summary")
    assert page.evaluate("window.__not_reloaded") is True  # live updates, same page
