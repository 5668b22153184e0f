"""The dashboard's web server (aiohttp): pages, login, and the checks on every request.

Routes: ``GET /login`` (the login form) and ``POST /login`` (the token, as a form field
``token``), ``POST /logout``, ``GET /`` (the one-page app), ``GET /static/<file>`` (its
script and style, public: they hold no data), and the JSON API of ``api.py``. The
middleware refuses, in order: a Host that does not name this dashboard (421), a
state-changing request whose Origin is not this host (403), and anything but the login
page and static files without a session cookie or a bearer token (pages: a redirect to
``/login``; the API: 401). Pages of other packages add ``/static/pages/<name>.js`` and
``/api/pages/...`` (see ``pages.py``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from importlib import resources

from aiohttp import web

from rayfield.dashboard import security
from rayfield.dashboard.api import Handler, StateApi
from rayfield.dashboard.pages import DashboardPage

__all__ = ["make_app"]

ALLOWED_HOSTS = web.AppKey("allowed_hosts", set)
SESSIONS = web.AppKey("sessions", security.Sessions)
TOKEN = web.AppKey("token", str)
PUBLIC = ("/login", "/static/")
CONTENT_TYPES = {".html": "text/html", ".js": "text/javascript", ".css": "text/css"}
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; "
    "frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
LOGIN_FAILED = '<p class="error" id="login-error">That is not the cluster token.</p>'


def _static_files() -> dict[str, bytes]:
    root = resources.files("rayfield.dashboard").joinpath("static")
    return {f.name: f.read_bytes() for f in root.iterdir() if f.is_file()}


def _reply(body: bytes, name: str, status: int = 200) -> web.Response:
    suffix = name[name.rfind(".") :]
    return web.Response(
        body=body, status=status, content_type=CONTENT_TYPES.get(suffix, "application/octet-stream")
    )


@web.middleware
async def _guard(request: web.Request, handler: Handler) -> web.StreamResponse:
    app = request.app
    if not security.host_ok(request.headers.get("Host"), app[ALLOWED_HOSTS]):
        return web.Response(
            status=421, text="421: this dashboard is not served under that host name\n"
        )
    origin = request.headers.get("Origin")
    if not security.origin_ok(request.method, origin, request.host, request.scheme):
        return web.Response(status=403, text="403: cross-origin request refused\n")
    if request.path.startswith(PUBLIC) or _logged_in(request):
        return await handler(request)
    if request.path.startswith("/api/"):
        return web.json_response(
            {"error": "log in at /login or send Authorization: Bearer <cluster token>"},
            status=401,
        )
    return _redirect("/login")


def _redirect(location: str) -> web.Response:
    return web.Response(status=303, headers={"Location": location})


async def _add_security_headers(request: web.Request, response: web.StreamResponse) -> None:
    response.headers.update(SECURITY_HEADERS)


def _logged_in(request: web.Request) -> bool:
    app = request.app
    if app[SESSIONS].valid(request.cookies.get(app[SESSIONS].cookie)):
        return True
    given = security.bearer(request.headers.get("Authorization"))
    return request.path.startswith("/api/") and security.token_ok(given, app[TOKEN])


def make_app(
    api: StateApi,
    token: str,
    allowed_hosts: Iterable[str],
    pages: Sequence[DashboardPage] = (),
    extra_routes: Sequence[web.RouteDef] = (),
) -> web.Application:
    """The dashboard application.

    Args:
        api: the JSON API over the cluster.
        token: the cluster token a user must present.
        allowed_hosts: accepted ``Host`` header values (``security.allowed_hosts``); an
            app whose port is only known once bound adds them to ``app[ALLOWED_HOSTS]``.
        pages: tabs added by other packages (``rayfield.dashboard.pages.discover()``):
            their scripts at ``/static/pages/<name>.js``, their data under
            ``/api/pages``.
        extra_routes: more routes behind the same checks (the job submission API of
            ``jobs.py``, the metrics page).
    """
    files = _static_files()
    scripts = {p.name: p.script.encode() for p in pages}
    app = web.Application(middlewares=[_guard], client_max_size=64 << 10)
    app[ALLOWED_HOSTS] = set(allowed_hosts)
    app[SESSIONS] = security.Sessions()
    app[TOKEN] = token
    app.on_response_prepare.append(_add_security_headers)

    async def index(request: web.Request) -> web.Response:
        return _reply(files["index.html"], "index.html")

    async def static(request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name not in files:
            raise web.HTTPNotFound()
        return _reply(files[name], name)

    async def page_script(request: web.Request) -> web.Response:
        script = scripts.get(request.match_info["page"])
        if script is None:
            raise web.HTTPNotFound()
        return _reply(script, "page.js")

    async def login_page(request: web.Request) -> web.Response:
        return _reply(files["login.html"], "login.html")

    async def login(request: web.Request) -> web.Response:
        form = await request.post()
        given = form.get("token")
        if not isinstance(given, str) or not security.token_ok(given, token):
            body = files["login.html"].replace(b"<!--error-->", LOGIN_FAILED.encode())
            return _reply(body, "login.html", status=401)
        response = _redirect("/")
        response.set_cookie(
            app[SESSIONS].cookie,
            app[SESSIONS].create(),
            httponly=True,
            secure=request.secure,  # over HTTPS the cookie never travels in clear
            samesite="Strict",
            path="/",
        )
        return response

    async def logout(request: web.Request) -> web.Response:
        app[SESSIONS].end(request.cookies.get(app[SESSIONS].cookie))
        response = _redirect("/login")
        response.del_cookie(app[SESSIONS].cookie, path="/")
        return response

    app.add_routes(
        [
            web.get("/", index),
            web.get("/static/{name}", static),
            web.get("/static/pages/{page}.js", page_script),
            web.get("/login", login_page),
            web.post("/login", login),
            web.post("/logout", logout),
            *api.routes(),
            *api.page_routes(pages),
            *extra_routes,
        ]
    )
    return app
