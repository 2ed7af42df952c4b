"""The web console: the built single-page app (``console/`` in the source tree, built by
Vite into ``dist/`` next to this module and shipped in the wheel), served by the admin.

``/`` and the app's own paths (``/jobs``, ``/runs/12`` ...) answer ``index.html`` (never
cached, so a new release is picked up at once); ``/assets/*`` are content-hashed files,
cached for a year. Every answer carries the console's Content-Security-Policy. Paths of the
executor API, ``/api/v1``, ``/health`` and the like are not the console's and pass through.
A browser's GET of a path nothing owns (``/foo``) answers ``index.html`` with status 404, so
the app shows its own not-found page; other clients keep the JSON 404.
"""

from __future__ import annotations

from pathlib import Path

from starlette.requests import Request
from starlette.responses import FileResponse, PlainTextResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from jobring.protocol.edge import CONTENT_SECURITY_POLICY

DIST = Path(__file__).parent / "dist"
__all__ = ["CONTENT_SECURITY_POLICY", "DIST", "HtmlNotFound", "console_routes"]

# The client-side routes' first path segments (the router in console/src/router.ts).
APP_SECTIONS = ("login", "password", "jobs", "runs", "groups", "calendars", "workflows", "workflow-runs",
                "users", "settings", "profile", "audit")
ROOT_FILES = ("favicon.svg",)
NO_CACHE = "no-cache"
IMMUTABLE = "public, max-age=31536000, immutable"
NOT_BUILT = (
    "The console is not built. From a source checkout run `make console` (needs node 20+ and npm), "
    "or install a jobring wheel, which ships it.\n"
)


def _headers(cache: str) -> dict[str, str]:
    return {
        "Cache-Control": cache,
        "Content-Security-Policy": CONTENT_SECURITY_POLICY,
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "same-origin",
        "X-Frame-Options": "DENY",
    }


class Console:
    """The console's handlers over one build folder."""

    def __init__(self, dist: Path = DIST) -> None:
        self.dist = dist

    async def index(self, request: Request) -> Response:
        page = self.dist / "index.html"
        if not page.is_file():
            return PlainTextResponse(NOT_BUILT, status_code=503, headers=_headers("no-store"))
        return FileResponse(page, media_type="text/html; charset=utf-8", headers=_headers(NO_CACHE))

    async def asset(self, request: Request) -> Response:
        return self._file(self.dist / "assets", request.path_params["name"], IMMUTABLE)

    async def root_file(self, request: Request) -> Response:
        return self._file(self.dist, request.url.path.lstrip("/"), NO_CACHE)

    def _file(self, folder: Path, name: str, cache: str) -> Response:
        # One plain file name: no folders, so nothing outside the build is reachable.
        if "/" in name or "\\" in name or name.startswith(".") or not name:
            return PlainTextResponse("not found", status_code=404, headers=_headers("no-store"))
        path = folder / name
        if not path.is_file():
            return PlainTextResponse("not found", status_code=404, headers=_headers("no-store"))
        return FileResponse(path, headers=_headers(cache))


def console_routes(dist: Path = DIST) -> list[BaseRoute]:
    """The console's routes; put them before the executor API's catch-all mount at ``/``."""
    console = Console(dist)
    routes: list[BaseRoute] = [
        Route("/", console.index, methods=["GET", "HEAD"]),
        Route("/assets/{name}", console.asset, methods=["GET", "HEAD"]),
    ]
    routes += [Route(f"/{name}", console.root_file, methods=["GET", "HEAD"]) for name in ROOT_FILES]
    for section in APP_SECTIONS:
        routes.append(Route(f"/{section}", console.index, methods=["GET", "HEAD"]))
        routes.append(Route(f"/{section}/{{rest:path}}", console.index, methods=["GET", "HEAD"]))
    return routes


class HtmlNotFound:
    """In front of the executor API's catch-all mount: a browser page load (GET or HEAD asking
    for ``text/html``) of a path outside ``api/`` gets the console's page with status 404,
    which shows the app's not-found page. The executor API's own paths, and every client that
    does not ask for HTML, reach the wrapped app unchanged."""

    def __init__(self, app: ASGIApp, dist: Path = DIST) -> None:
        self.app = app
        self.page = dist / "index.html"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] in ("GET", "HEAD") and self.page.is_file():
            path: str = scope["path"]
            root: str = scope.get("root_path", "")
            if root and path.startswith(root):  # under a Mount: the path relative to it
                path = path[len(root):]
            accept = b",".join(v for k, v in scope.get("headers", []) if k == b"accept")
            if b"text/html" in accept and path != "/api" and not path.startswith("/api/"):
                response = FileResponse(self.page, status_code=404, media_type="text/html; charset=utf-8",
                                        headers=_headers(NO_CACHE))
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)
