"""The index page: ``GET /`` serves a web page that shows the served indexes, browses an
index entity by entity and asks the model a question with and without the index.

The page is four static files in the wheel (``static/``: ``index.html``, ``app.js``,
``style.css``, ``icon.svg``), plain JavaScript that calls the server's own API from the same
origin: no build step, no third-party code. docs/server-api.md ("The page") says what it shows.

They are served by an ASGI middleware outside the API's guard: the page holds no data, so
it loads without the API key (its calls to ``/v1/*`` carry the key the person types when
the server answers 401), while the guard's Host check still applies to it (a page reached
through DNS rebinding is refused as the API is). Every answer carries a Content-Security-
Policy that allows the page's own script, style and same-origin calls only: were a label
ever written into the document as markup, no script in it would run.
"""

from __future__ import annotations

import hashlib
from importlib.resources import files
from typing import Any, Callable

# path -> (file in static/, media type)
PAGE_FILES = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/static/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/static/style.css": ("style.css", "text/css; charset=utf-8"),
    "/static/icon.svg": ("icon.svg", "image/svg+xml"),
    "/favicon.ico": ("icon.svg", "image/svg+xml"),  # what a browser asks for a page without the link
}

SECURITY_HEADERS = {
    "content-security-policy": "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
                               "img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    # a new wheel's page is fetched again (the ETag makes that a 304 when nothing changed)
    "cache-control": "no-cache",
}


def _load() -> dict[str, tuple[bytes, str, str]]:
    """Each path's bytes, media type and ETag, read once from the installed package."""
    static = files(__package__) / "static"
    found = {}
    for path, (name, media) in PAGE_FILES.items():
        body = (static / name).read_bytes()
        found[path] = (body, media, '"' + hashlib.sha256(body).hexdigest()[:32] + '"')
    return found


class PageFiles:
    """ASGI middleware: GET and HEAD of the page's paths answered from memory, on a Host the
    server serves; anything else passes to the application (and its guard)."""

    def __init__(self, app, host_allowed) -> None:
        self.app, self.host_allowed = app, host_allowed
        self.pages = _load()

    async def __call__(self, scope, receive, send) -> None:
        page = self.pages.get(scope["path"]) if scope["type"] == "http" else None
        if page is None or scope["method"] not in ("GET", "HEAD"):
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        if not self.host_allowed(headers.get("host", "")):
            return await self.app(scope, receive, send)  # the guard refuses it, as for the API
        body, media, etag = page
        status = 304 if headers.get("if-none-match") == etag else 200
        out: list[tuple[bytes, bytes]] = [(k.encode(), v.encode()) for k, v in SECURITY_HEADERS.items()]
        out.append((b"etag", etag.encode()))
        if status == 200:
            out += [(b"content-type", media.encode()), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": status, "headers": out})
        await send({"type": "http.response.body", "body": body if status == 200 and scope["method"] == "GET" else b""})


def mount_page(app: Any, host_allowed: Callable[[str], bool]) -> None:
    """Serve the page at ``/`` (and its script and style under ``/static/``) in front of the
    API's guard; call it after the guard is added (the middleware added last runs first).
    ``host_allowed``: the guard's Host check, the one the API applies."""
    app.add_middleware(PageFiles, host_allowed=host_allowed)
