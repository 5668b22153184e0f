"""Pages that other packages add to the dashboard, found through entry points.

A package adds a tab to the dashboard by declaring an entry point in the group
``rayfield.dashboard_pages`` that names a :class:`DashboardPage` (or a function with no
arguments that returns one)::

    [project.entry-points."rayfield.dashboard_pages"]
    tune = "rayfield.tune.dashboard_page:PAGE"

The dashboard process loads every such entry point once, at start. For each page it
serves:

* ``GET /api/pages``: ``[{"name", "title"}, ...]`` of every page (logged in);
* ``GET /api/pages/<name>``: ``page.data(client, query)`` as JSON, run on the
  dashboard's thread pool (logged in); ``client`` is the dashboard's
  :class:`rayfield.util.state.StateClient` and ``query`` the request's query parameters;
* ``GET /static/pages/<name>.js``: ``page.script`` (public, like the dashboard's own
  script: it must hold no data).

The page's script runs in the dashboard's page and registers how to draw the tab with
``rayfieldDashboard.addPage(name, refresh)``; ``refresh(section, tools)`` is called
about every second while the tab is shown, with the tab's ``<section>`` element and
``tools``: ``api(path)`` (a logged-in ``fetch`` returning the JSON), ``dataUrl(params)``
(the page's data URL with ``params`` as its query), ``el(tag, attrs, ...children)`` (an
element whose children are put in as text, never as HTML), ``fmtNum``, ``fmtBytes``.

The package that provides the page never imports the dashboard's server (aiohttp), and
the dashboard imports only the entry points. A page that fails to load, has a bad name
or repeats a name is left out with a warning in the dashboard's log; the rest work.

Example:
    >>> page = DashboardPage("queue", "Queue", "/* js */", lambda client, query: [])
    >>> page.name
    'queue'
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from importlib import metadata
from typing import Any

__all__ = ["ENTRY_POINT_GROUP", "RESERVED_NAMES", "DashboardPage", "PageError", "discover"]

ENTRY_POINT_GROUP = "rayfield.dashboard_pages"
RESERVED_NAMES = frozenset({"nodes", "actors", "jobs", "tasks", "objects", "logs", "timeline"})
"""The dashboard's own tabs; a page cannot take their names."""
MAX_SCRIPT_BYTES = 256 << 10
_NAME = re.compile(r"[a-z][a-z0-9-]{0,31}")

log = logging.getLogger("rayfield.dashboard")


class PageError(ValueError):
    """A page that cannot be added (its message says what is wrong with it)."""


@dataclass(frozen=True)
class DashboardPage:
    """One tab of the dashboard, provided by another package.

    Args:
        name: the tab's id in URLs (``#name``, ``/api/pages/name``): lowercase letters,
            digits and ``-``, starting with a letter, at most 32 characters, none of
            :data:`RESERVED_NAMES`.
        title: the tab's label.
        script: the tab's JavaScript (at most 256 KiB); it calls
            ``rayfieldDashboard.addPage(name, refresh)``.
        data: ``data(client, query) -> JSON-able value``: what ``/api/pages/<name>``
            answers. It runs on a thread (blocking calls are fine) and must keep its
            answer small: the page asks for it about every second. ``ValueError`` from it
            is answered 400 with its message; the state client's errors as the other
            API routes (400 or 502).

    Raises:
        PageError: a bad name, an empty title or a script over the limit.
    """

    name: str
    title: str
    script: str
    data: Callable[[Any, Mapping[str, str]], Any]

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.fullmatch(self.name):
            raise PageError(
                f"dashboard page name {self.name!r} must be 1-32 lowercase letters, digits "
                "or '-', starting with a letter"
            )
        if self.name in RESERVED_NAMES:
            raise PageError(f"dashboard page name {self.name!r} is one of the dashboard's own")
        if not self.title:
            raise PageError(f"dashboard page {self.name!r} needs a title")
        if len(self.script.encode()) > MAX_SCRIPT_BYTES:
            raise PageError(f"dashboard page {self.name!r}: script over {MAX_SCRIPT_BYTES} bytes")
        if not callable(self.data):
            raise PageError(f"dashboard page {self.name!r}: data must be callable")


def discover(entry_points: Iterable[Any] | None = None) -> list[DashboardPage]:
    """The pages of the installed packages, sorted by name.

    Args:
        entry_points: the entry points to load (each with ``.name`` and ``.load()``);
            None: those of the group :data:`ENTRY_POINT_GROUP`.

    Returns:
        The pages that loaded; each one that failed (an import error, not a
        :class:`DashboardPage`, a bad or repeated name) is logged and left out.
    """
    if entry_points is None:
        entry_points = metadata.entry_points(group=ENTRY_POINT_GROUP)
    pages: dict[str, DashboardPage] = {}
    for ep in entry_points:
        try:
            page = ep.load()
            if not isinstance(page, DashboardPage) and callable(page):
                page = page()
            if not isinstance(page, DashboardPage):
                raise PageError(f"it gave a {type(page).__name__}, not a DashboardPage")
            if page.name in pages:
                raise PageError(f"another page is already named {page.name!r}")
        except Exception as exc:  # one broken package must not take the dashboard down
            log.warning("dashboard page %r is left out: %s", getattr(ep, "name", ep), exc)
            continue
        pages[page.name] = page
    return [pages[name] for name in sorted(pages)]
