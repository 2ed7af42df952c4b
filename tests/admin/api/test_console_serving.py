"""The web console's serving: index.html for the app's paths (never cached), hashed assets
cached for a year, the console's CSP on every answer, and no shadowing of the admin's APIs."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Mount
from starlette.types import Receive, Scope, Send

from jobring.admin.console import CONTENT_SECURITY_POLICY, DIST, HtmlNotFound, console_routes
from jobring.admin.runtime.app import create_app
from jobring.admin.services.settings import AdminSettings

INDEX = '<!doctype html><script type="module" src="/assets/index-abc123.js"></script>'


@pytest.fixture
def dist(tmp_path: Path) -> Path:
    (tmp_path / "assets").mkdir()
    (tmp_path / "index.html").write_text(INDEX)
    (tmp_path / "assets" / "index-abc123.js").write_text("console.log(1)")
    (tmp_path / "favicon.svg").write_text("<svg/>")
    (tmp_path / "secret.txt").write_text("not served")
    return tmp_path


def _client(app: Starlette) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://admin.test")


APP_PATHS = ["/", "/login", "/jobs", "/jobs/12", "/runs/3051", "/groups", "/users", "/settings", "/profile",
             "/password", "/jobs/12/glue", "/audit"]


@pytest.mark.parametrize("path", APP_PATHS)
async def test_app_paths_answer_the_index_uncached(dist: Path, path: str) -> None:
    async with _client(Starlette(routes=console_routes(dist))) as http:
        r = await http.get(path)
    assert r.status_code == 200
    assert r.text == INDEX
    assert r.headers["content-type"].startswith("text/html")
    assert r.headers["cache-control"] == "no-cache"
    assert r.headers["content-security-policy"] == CONTENT_SECURITY_POLICY


async def test_hashed_assets_are_immutable(dist: Path) -> None:
    async with _client(Starlette(routes=console_routes(dist))) as http:
        r = await http.get("/assets/index-abc123.js")
        assert r.status_code == 200
        assert r.headers["cache-control"] == "public, max-age=31536000, immutable"
        assert "javascript" in r.headers["content-type"]
        assert r.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
        for missing in ("/assets/nope.js", "/assets/..%2Fsecret.txt", "/assets/.hidden", "/secret.txt"):
            assert (await http.get(missing)).status_code == 404, missing
        assert (await http.get("/favicon.svg")).status_code == 200


def test_csp_is_strict() -> None:
    policy = dict(part.strip().split(" ", 1) for part in CONTENT_SECURITY_POLICY.split(";"))
    assert policy["default-src"] == "'self'"
    assert policy["script-src"] == "'self'"
    assert policy["style-src"] == "'self'"
    assert "unsafe" not in CONTENT_SECURITY_POLICY
    assert policy["frame-ancestors"] == "'none'"


async def test_unbuilt_console_says_how_to_build(tmp_path: Path) -> None:
    async with _client(Starlette(routes=console_routes(tmp_path / "missing"))) as http:
        r = await http.get("/")
    assert r.status_code == 503
    assert "make console" in r.text


async def test_the_admin_app_serves_the_console_without_shadowing_its_apis() -> None:
    # No lifespan here: the APIs answer 503 "starting", which shows the request reached them.
    app = create_app(AdminSettings())
    async with _client(app) as http:
        assert (await http.get("/")).headers["content-security-policy"] == CONTENT_SECURITY_POLICY
        for path in ("/api/registry", "/api/callback", "/xxl-job-admin/api/registry", "/api/addJob"):
            r = await http.post(path, json=[])
            assert r.status_code == 503, path
        assert (await http.get("/api/v1/auth/me")).status_code == 503
        assert (await http.get("/health")).status_code == 503
        page = await http.get("/foo", headers={"Accept": "text/html"})
        built = (DIST / "index.html").is_file()  # unbuilt: the executor API's own answer ("starting")
        assert page.status_code == (404 if built else 503)


async def test_a_browser_gets_the_apps_not_found_page_for_a_path_nothing_owns(dist: Path) -> None:
    async def executor_api(scope: Scope, receive: Receive, send: Send) -> None:
        await JSONResponse({"error": "no such path", "field": None}, status_code=404)(scope, receive, send)

    app = Starlette(routes=[Mount("/xxl-job-admin", app=HtmlNotFound(executor_api, dist)),
                            Mount("", app=HtmlNotFound(executor_api, dist))])
    html = {"Accept": "text/html,application/xhtml+xml;q=0.9,*/*;q=0.8"}
    async with _client(app) as http:
        for path in ("/foo", "/foo/bar", "/xxl-job-admin/nothing"):
            page = await http.get(path, headers=html)
            assert page.status_code == 404 and page.text == INDEX, path
            assert page.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
            assert (await http.get(path)).json()["error"] == "no such path"  # not a browser: JSON
        for path in ("/api/registry", "/xxl-job-admin/api/registry", "/api"):
            assert (await http.get(path, headers=html)).json()["error"] == "no such path", path
        assert (await http.post("/foo", headers=html)).json()["error"] == "no such path"
