from __future__ import annotations

from jobring.admin.store import Store
from tests.admin.api_harness import api_env


async def test_openapi_and_docs_are_served(sqlite_store: Store) -> None:
    async with api_env(sqlite_store, users=False) as env, env.client() as http:
        spec = (await http.get("/openapi.json")).json()
        assert "/jobs" in spec["paths"] and "/auth/login" in spec["paths"]
        docs = await http.get("/docs")
        # Relative to the page (/api/v1/docs): the document and Swagger UI from this admin.
        assert docs.status_code == 200 and 'data-openapi-url="openapi.json"' in docs.text
        for asset in ("swagger-ui-bundle.js", "swagger-ui.css", "docs-init.js", "LICENSE"):
            assert (await http.get(f"/docs/static/{asset}")).status_code == 200, asset


async def test_create_and_get_job(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client("admin") as http:
        r = await http.post(
            "/jobs",
            json={
                "job_group": env.group_a,
                "job_desc": "hello",
                "executor_handler": "demo",
                "schedule_type": "CRON",
                "schedule_conf": "0 */5 * * * ?",
            },
        )
        assert r.status_code == 201, r.text
        job = r.json()
        r = await http.get(f"/jobs/{job['id']}")
        assert r.status_code == 200 and r.json()["job_desc"] == "hello"


def test_the_docs_assets_are_package_data() -> None:
    # The wheel carries what the docs page loads (no CDN): every file is matched by package-data.
    import fnmatch
    import tomllib
    from pathlib import Path

    from jobring.admin.api.management.docs import STATIC_DIR

    root = Path(__file__).resolve().parents[3]
    patterns = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"][
        "jobring"]
    package = STATIC_DIR.parents[2]  # src/jobring
    files = [p.relative_to(package).as_posix() for p in STATIC_DIR.iterdir()]
    assert {"admin/api/docs_static/swagger-ui-bundle.js", "admin/api/docs_static/LICENSE"} <= set(files)
    assert all(any(fnmatch.fnmatch(f, pat) for pat in patterns) for f in files), files
