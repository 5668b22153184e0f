"""The Cython, news reader and hyperparameter search examples on a real 2-CPU runtime.

Like ``test_examples.py`` (whose ``runtime`` fixture these tests share): each test runs an
example's code and checks what a broken runtime or example would get wrong. The Cython
example compiles its ``.pyx`` modules on first use (tens of seconds of CPU once; the
extensions stay next to their sources). The news reader is tested through its HTTP API
(Flask's test client and the real threaded server) and in headless Chromium, the browser
``tools/install_browser.py`` finds or installs, as the dashboard's tests do.
"""

from __future__ import annotations

import runpy
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("sklearn")

import numpy as np
from playwright.sync_api import Browser, expect
from test_examples import EXAMPLES_DIR, example, runtime  # noqa: F401  (runtime: a fixture)

import rayfield as rf

TOOL = Path(__file__).resolve().parents[4] / "tools" / "install_browser.py"


@pytest.mark.usefixtures("runtime")
class TestCython:
    @pytest.mark.timeout(900)  # the first run compiles three extensions on a loaded machine
    def test_compiled_functions_run_as_remote_tasks(self) -> None:
        module = example("cython_remote")
        simple = module.load()["simple"]
        # Compiled by Cython, not plain Python functions, yet `rf.remote` takes them as is.
        assert not isinstance(simple.fib, types.FunctionType)
        assert rf.get(rf.remote(simple.fib).remote(40)) == module.fib_reference(40)
        metrics = module.main(num_workers=2, fib_n=24, num_primes=500)
        assert metrics["greet_ok"] and metrics["fib_ok"] and metrics["primes_ok"]
        assert metrics["masked_log_ok"]
        assert metrics["kernel_max_error"] < 1e-9  # BLAS dgemm kernel equal to scipy's cdist
        assert metrics["actor_total"] == 20  # the compiled class as an actor kept its state
        assert metrics["ok"]

    def test_compiled_errors_reach_the_caller(self) -> None:
        blas = example("cython_remote").load()["blas"]
        ref = rf.remote(blas.gaussian_kernel).remote(np.ones((2, 3)), np.ones((2, 4)), 1.0)
        with pytest.raises(rf.exceptions.TaskError, match="a has 3 columns but b has 4"):
            rf.get(ref)


@pytest.mark.usefixtures("runtime")
class TestHyperparameterSearch:
    def test_best_accuracy_beats_threshold(self) -> None:
        metrics = example("hyperparameter_search").main(num_trials=10, max_pending=4, epochs=8)
        assert metrics["trials"] == 10 and sorted(metrics["consumed"]) == list(range(10))
        assert metrics["best_accuracy"] > 0.9  # chance is 0.1; most random configs stay far below
        assert metrics["best_accuracy"] == max(metrics["accuracies"])
        assert min(metrics["accuracies"]) < 0.5  # a real search: configurations differ

    def test_results_are_consumed_in_completion_order(self) -> None:
        good = {"learning_rate": 0.3, "batch_size": 32, "dropout": 0.1, "stddev": 0.1}
        configs = [dict(good, epochs=60)] + [dict(good, epochs=1) for _ in range(4)]
        metrics = example("hyperparameter_search").main(
            num_trials=5, max_pending=5, configs=configs
        )
        # Trial 0 was submitted first but trains 60 times longer: it is consumed last.
        assert metrics["consumed"][-1] == 0
        finished = dict(zip(metrics["consumed"], metrics["finished_at"], strict=True))
        assert all(finished[0] > finished[i] for i in range(1, 5))
        assert metrics["accuracies"][-1] > 0.9


# ---- news reader ------------------------------------------------------------------------


@pytest.fixture()
def news(runtime: None) -> Iterator[dict[str, Any]]:  # noqa: F811
    """A fresh NewsServer actor, its Flask app (test client and real server), the feeds' URL."""
    module = example("news_reader")
    server = module.NewsServer.remote(":memory:")
    app = module.create_app(server)
    try:
        with (
            module.serve_in_thread(module.feed_server()) as feeds_url,
            module.serve_in_thread(module.web_server(app)) as url,
        ):
            yield {"module": module, "client": app.test_client(), "url": url, "feeds": feeds_url}
    finally:
        rf.kill(server)


def api(news: dict[str, Any], method: str, *args: Any) -> tuple[int, dict[str, Any]]:
    response = news["client"].post("/api", json={"method_name": method, "method_args": list(args)})
    return response.status_code, response.get_json()


class TestNewsReaderApi:
    def test_feeds_are_read_stored_and_starred(self, news: dict[str, Any]) -> None:
        module, feeds_dir = news["module"], news["module"].FEEDS_DIR
        for name in ("observatory.xml", "library.atom"):
            status, body = api(news, "retrieve_feed", news["feeds"] + name)
            assert status == 200
            expected = module.parse_feed((feeds_dir / name).read_bytes(), news["feeds"] + name)
            assert body["result"]["channel"] == expected["channel"]
            items = body["result"]["items"]
            assert [{k: v for k, v in i.items() if k != "liked"} for i in items] == expected[
                "items"
            ]
            assert not any(i["liked"] for i in items)
        status, body = api(news, "like_item", "http://library.example/updates/hours", True)
        assert (status, body) == (200, {"result": True})
        status, body = api(news, "starred_items")
        assert [i["title"] for i in body["result"]] == ["Longer opening hours in March"]
        # Reading the feed again keeps the star; unstarring removes it from the list.
        _, body = api(news, "retrieve_feed", news["feeds"] + "library.atom")
        assert [i["liked"] for i in body["result"]["items"]] == [True, False]
        api(news, "like_item", "http://library.example/updates/hours", False)
        assert api(news, "starred_items") == (200, {"result": []})

    def test_bad_calls_get_400_with_the_reason(self, news: dict[str, Any]) -> None:
        status, body = api(news, "__init__", ":memory:")
        assert status == 400 and "unknown method '__init__'" in body["error"]
        status, body = api(news, "like_item", "http://nowhere.example/", True)
        assert status == 400 and "retrieve its feed first" in body["error"]
        status, body = api(news, "retrieve_feed", news["feeds"] + "missing.xml")
        assert (
            status == 400 and "could not read the feed" in body["error"] and "404" in body["error"]
        )
        response = news["client"].post("/api", data="not json", content_type="text/plain")
        assert response.status_code == 400 and "JSON object" in response.get_json()["error"]
        response = news["client"].post(
            "/api", json={"method_name": "starred_items", "method_args": 1}
        )
        assert response.status_code == 400 and "must be a JSON list" in response.get_json()["error"]

    def test_main_reads_every_fixture_feed(self, runtime: None) -> None:  # noqa: F811
        metrics = example("news_reader").main()
        assert metrics["feeds"] == 3 and metrics["items"] == 7
        assert metrics["items_match"] and metrics["starred_ok"] and metrics["page_ok"]
        assert len(metrics["starred"]) == 3 and metrics["ok"]


@pytest.fixture()
def browser() -> Iterator[Browser]:
    """Headless Chromium, closed before the runtime's check that no child process is left."""
    with runpy.run_path(str(TOOL))["headless_chromium"]() as chromium:
        yield chromium


def test_news_reader_page_adds_a_channel_and_stars(news: dict[str, Any], browser: Browser) -> None:
    page = browser.new_context().new_page()
    page.goto(news["url"])
    page.fill("#feed-url", news["feeds"] + "garden.xml")
    page.click("button[type=submit]")
    items = page.locator(".channel .item")
    expect(items).to_have_count(2)
    expect(page.locator(".channel h2")).to_have_text("Community Garden Bulletin")
    items.nth(1).locator(".star").click()
    expect(items.nth(1)).to_have_class("item liked")
    expect(page.locator("#starred-list li")).to_have_text(["Rain barrels connected"])
    assert api(news, "starred_items")[1]["result"][0]["link"] == (
        "http://garden.example/bulletin/rain-barrels"
    )
    # The star lives in the actor's database: a new page lists it.
    page.reload()
    expect(page.locator("#starred-list li")).to_have_text(["Rain barrels connected"])
    # An unreadable feed shows the server's reason, and nothing is added.
    page.fill("#feed-url", news["feeds"] + "missing.xml")
    page.click("button[type=submit]")
    expect(page.locator("#error")).to_contain_text("could not read the feed")
    expect(page.locator(".channel")).to_have_count(0)


def test_run_all_knows_these_examples() -> None:
    """The two fast ones run by default (so in `nox -s demo`); the Cython one when named."""
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(EXAMPLES_DIR))
        run_all = example("run_all")
    assert {"hyperparameter_search", "news_reader"} <= set(run_all.EXAMPLES)
    assert "cython_remote" in run_all.ON_REQUEST and "cython_remote" not in run_all.EXAMPLES
