"""News reader: an actor as a stateful service behind a Flask web server, with a small page.

Usage (from this folder)::

    python news_reader.py            # reads the fixture feeds through the API, checks, exits
    python news_reader.py --serve    # serves the page until Ctrl-C; paste a printed feed URL

The ``NewsServer`` actor owns a SQLite database of articles (title, link, description,
published, feed, liked). ``retrieve_feed(url)`` downloads an RSS or Atom feed, parses it with
feedparser, stores its items and returns the channel and its items; ``like_item(link, liked)``
stars or unstars an article; ``starred_items()`` lists the starred ones. The Flask app answers
``POST /api`` with JSON ``{"method_name": ..., "method_args": [...]}`` by calling the actor
method of that name (``getattr(handle, name).remote(*args)``) and blocking on its result, and
serves the page (``news_reader_site/index.html``), which adds channels and stars articles
through that API.

The feeds are fixture files (``news_reader_site/feeds``: two RSS 2.0 feeds and an Atom feed)
served by a local HTTP server, so everything runs offline. The servers listen on loopback and
the database is a file of this machine: on a cluster (``run_all.py --address``) the actor may
run on any node of this machine, not on another machine.

Ports the News Reader example of Ray's documentation (a Flask server plus an actor; its Vue.js
front end is replaced by one static page, its ``atoma`` parser by feedparser, and ``requests``
by the standard library). Prints what it read and starred, and checks it against feedparser
run on the fixture files directly.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import json
import logging
import sqlite3
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from _common import prepare_worker_environment

import rayfield as rf

SITE_DIR = Path(__file__).resolve().parent / "news_reader_site"
FEEDS_DIR = SITE_DIR / "feeds"
API_METHODS = frozenset({"retrieve_feed", "like_item", "starred_items"})


def parse_feed(content: bytes, url: str) -> dict[str, Any]:
    """Parses RSS or Atom bytes with feedparser.

    Returns:
        ``{"channel": {"title", "link", "url"}, "items": [{"title", "link", "description",
        "published"}]}``; strings, ``""`` where the feed lacks a field.

    Raises:
        ValueError: the bytes are not a feed (feedparser found no channel and no entries).
    """
    import feedparser

    parsed = feedparser.parse(content)
    if not parsed.entries and not parsed.feed.get("title"):
        problem = parsed.get("bozo_exception", "no channel and no entries")
        raise ValueError(f"{url} is not an RSS or Atom feed: {problem}")
    items = [
        {
            "title": entry.get("title", ""),
            "link": entry.get("link", ""),
            "description": entry.get("summary", ""),
            # dict.get: FeedParserDict's own get maps a missing key to "updated" with a warning
            "published": dict.get(entry, "published") or dict.get(entry, "updated", ""),
        }
        for entry in parsed.entries
    ]
    channel = {
        "title": parsed.feed.get("title", url),
        "link": parsed.feed.get("link", ""),
        "url": url,
    }
    return {"channel": channel, "items": items}


@rf.remote
class NewsServer:
    """The reader's state: one SQLite database, touched only by this actor's methods."""

    def __init__(self, db_path: str) -> None:
        self.db = sqlite3.connect(db_path)
        self.db.execute(
            "CREATE TABLE IF NOT EXISTS news (title TEXT, link TEXT PRIMARY KEY, description TEXT,"
            " published TEXT, feed TEXT, liked INTEGER NOT NULL DEFAULT 0)"
        )
        self.db.commit()

    def retrieve_feed(self, url: str) -> dict[str, Any]:
        """Downloads and parses the feed at ``url``, stores its items, returns them.

        Items already stored keep their ``liked`` flag. Each returned item has ``liked``.

        Raises:
            ValueError: the URL could not be read (the reason says why) or is not a feed.
        """
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                content = response.read()
        except (urllib.error.URLError, OSError, ValueError) as err:
            raise ValueError(f"could not read the feed {url}: {err}") from err
        feed = parse_feed(content, url)
        with self.db:
            self.db.executemany(
                "INSERT INTO news (title, link, description, published, feed)"
                " VALUES (?, ?, ?, ?, ?) ON CONFLICT(link) DO UPDATE SET title = excluded.title,"
                " description = excluded.description, published = excluded.published",
                [
                    (i["title"], i["link"], i["description"], i["published"], url)
                    for i in feed["items"]
                ],
            )
        liked = dict(self.db.execute("SELECT link, liked FROM news WHERE feed = ?", (url,)))
        for item in feed["items"]:
            item["liked"] = bool(liked.get(item["link"], 0))
        return feed

    def like_item(self, link: str, is_faved: bool) -> bool:
        """Stars (``is_faved``) or unstars the stored article ``link``.

        Raises:
            KeyError: no stored article has this link (retrieve its feed first).
        """
        with self.db:
            changed = self.db.execute(
                "UPDATE news SET liked = ? WHERE link = ?", (int(bool(is_faved)), link)
            ).rowcount
        if not changed:
            raise KeyError(f"no stored article has the link {link!r}: retrieve its feed first")
        return bool(is_faved)

    def starred_items(self) -> list[dict[str, str]]:
        """The starred articles, as ``{"title", "link", "feed"}``, by title."""
        rows = self.db.execute("SELECT title, link, feed FROM news WHERE liked = 1 ORDER BY title")
        return [{"title": t, "link": link, "feed": f} for t, link, f in rows]


def create_app(server: Any) -> Any:
    """The Flask app: ``GET /`` the page, ``POST /api`` a call of ``server``'s methods.

    ``/api`` answers ``{"result": ...}``; 400 ``{"error": ...}`` for a body that is not
    ``{"method_name": one of API_METHODS, "method_args": [...]}`` or for an error the method
    raised (its message).
    """
    from flask import Flask, jsonify, request, send_from_directory

    app = Flask(__name__, static_folder=None)

    @app.get("/")
    def index() -> Any:
        return send_from_directory(SITE_DIR, "index.html")

    @app.post("/api")
    def api() -> Any:
        body = request.get_json(silent=True)
        if not isinstance(body, dict):
            return jsonify(error="send a JSON object {method_name, method_args}"), 400
        name, args = body.get("method_name"), body.get("method_args", [])
        if name not in API_METHODS:
            return jsonify(error=f"unknown method {name!r}; known: {sorted(API_METHODS)}"), 400
        if not isinstance(args, list):
            return jsonify(error="method_args must be a JSON list"), 400
        try:
            result = rf.get(getattr(server, name).remote(*args))
        except rf.exceptions.TaskError as err:
            cause = err.cause if err.cause is not None else err
            return jsonify(error=f"{name} failed: {cause}"), 400
        return jsonify(result=result)

    return app


@contextmanager
def serve_in_thread(server: Any) -> Iterator[str]:
    """Runs ``server`` (``serve_forever``/``shutdown``) in a thread; yields its base URL."""
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    host, port = server.server_address[:2]
    try:
        yield f"http://{host}:{port}/"
    finally:
        server.shutdown()
        thread.join()
        server.server_close()


def feed_server() -> http.server.ThreadingHTTPServer:
    """An HTTP server on a free loopback port serving the fixture feeds, quietly."""

    class Handler(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

    handler = functools.partial(Handler, directory=str(FEEDS_DIR))
    return http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)


def web_server(app: Any, port: int = 0) -> Any:
    """The Flask app on loopback ``port`` (0: a free one), werkzeug's threaded server."""
    from werkzeug.serving import make_server

    return make_server("127.0.0.1", port, app, threaded=True)


def call_api(url: str, method_name: str, *method_args: Any) -> Any:
    """POSTs one call to ``url``'s ``/api``; returns its result.

    Raises:
        RuntimeError: the server answered an error (its message).
    """
    request = urllib.request.Request(
        url + "api",
        data=json.dumps({"method_name": method_name, "method_args": list(method_args)}).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.loads(response.read())["result"]
    except urllib.error.HTTPError as err:
        raise RuntimeError(json.loads(err.read()).get("error", str(err))) from err


def main(num_workers: int = 2, db_path: str | None = None) -> dict[str, Any]:
    """Reads every fixture feed through the web API, stars the first item of each, checks.

    ``num_workers`` is unused: the service is one actor. The database is a fresh temporary
    file unless ``db_path`` is given.

    Returns:
        ``feeds``, ``items`` (stored), ``items_match`` (every feed's items equal feedparser's
        on the fixture file), ``starred`` (links), ``starred_ok`` (``starred_items`` lists them
        and a second retrieval keeps their flags), ``page_ok`` (``GET /`` serves the page),
        ``wall_s``, and ``ok``.
    """
    del num_workers
    start = time.perf_counter()
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # no line per request
    feeds = sorted(p.name for p in FEEDS_DIR.iterdir())
    with tempfile.TemporaryDirectory(prefix="news-reader-") as tmp:
        server = NewsServer.remote(db_path or str(Path(tmp) / "newsreader.db"))  # type: ignore[attr-defined]
        try:
            with (
                serve_in_thread(feed_server()) as feeds_url,
                serve_in_thread(web_server(create_app(server))) as url,
            ):
                print(f"web server at {url}, fixture feeds at {feeds_url}")
                with urllib.request.urlopen(url, timeout=30) as response:
                    page_ok = b"News reader" in response.read()
                read = {name: call_api(url, "retrieve_feed", feeds_url + name) for name in feeds}
                items_match = all(
                    [{k: i[k] for k in i if k != "liked"} for i in read[name]["items"]]
                    == parse_feed((FEEDS_DIR / name).read_bytes(), feeds_url + name)["items"]
                    for name in feeds
                )
                for name, feed in read.items():
                    titles = "; ".join(i["title"] for i in feed["items"])
                    print(f"{feed['channel']['title']} ({name}): {titles}")
                starred = sorted(feed["items"][0]["link"] for feed in read.values())
                for link in starred:
                    call_api(url, "like_item", link, True)
                listed = sorted(i["link"] for i in call_api(url, "starred_items"))
                again = call_api(url, "retrieve_feed", feeds_url + feeds[0])
                kept = [i["liked"] for i in again["items"]] == [True] + [False] * (
                    len(again["items"]) - 1
                )
                print(f"starred {len(starred)} articles; starred_items lists {len(listed)}")
        finally:
            rf.kill(server)
    starred_ok = listed == starred and kept
    items = sum(len(feed["items"]) for feed in read.values())
    return {
        "feeds": len(feeds),
        "items": items,
        "items_match": items_match,
        "starred": starred,
        "starred_ok": starred_ok,
        "page_ok": page_ok,
        "wall_s": time.perf_counter() - start,
        "ok": items_match and starred_ok and page_ok and items > 0,
    }


def serve(db_path: str, port: int) -> None:
    """Serves the page and API on ``port`` and the fixture feeds on a free port, until Ctrl-C."""
    server = NewsServer.remote(db_path)  # type: ignore[attr-defined]
    app_server = web_server(create_app(server), port)
    with serve_in_thread(feed_server()) as feeds_url, serve_in_thread(app_server) as url:
        print(f"open {url} and add a channel, e.g. {feeds_url}observatory.xml; Ctrl-C stops")
        print(f"the articles are in {db_path} (sqlite3 {db_path} 'SELECT * FROM news;')")
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            pass


def cli() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--serve", action="store_true", help="serve the page until Ctrl-C")
    parser.add_argument("--port", type=int, default=5000, help="with --serve: the page's port")
    parser.add_argument("--db", default="newsreader.db", help="with --serve: the database file")
    parser.add_argument("--num-cpus", type=int, default=2)
    parser.add_argument("--num-workers", type=int, default=2)
    args = parser.parse_args()
    prepare_worker_environment()
    rf.init(num_cpus=args.num_cpus)
    try:
        if args.serve:
            serve(str(Path(args.db).resolve()), args.port)  # the actor's cwd may differ
            ok = True
        else:
            ok = main(num_workers=args.num_workers)["ok"]
    finally:
        rf.shutdown()
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    cli()
