"""The API docs page (``/docs``): Swagger UI served from the package, no external origin.

The page has no inline script or style (the admin's CSP forbids them): Swagger UI's
bundle, its stylesheet and ``docs-init.js`` come from ``/docs/static/`` (files in
``jobring/admin/api/docs_static``, Swagger UI's Apache-2.0 license next to them).
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import HTMLResponse
from starlette.staticfiles import StaticFiles

STATIC_DIR = Path(__file__).resolve().parent.parent / "docs_static"

DOCS_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{title}</title>
<link rel="icon" type="image/png" href="docs/static/favicon-32x32.png">
<link rel="stylesheet" href="docs/static/swagger-ui.css">
</head>
<body>
<div id="swagger-ui" data-openapi-url="openapi.json"></div>
<script src="docs/static/swagger-ui-bundle.js"></script>
<script src="docs/static/docs-init.js"></script>
</body>
</html>
"""


def install_docs(app: FastAPI) -> None:
    """Serve the docs page at ``/docs`` and its assets at ``/docs/static``.

    Asset and document URLs are relative to the page, so it works wherever the API is mounted.
    """
    page = DOCS_PAGE.format(title=app.title)

    async def docs() -> HTMLResponse:
        return HTMLResponse(page, headers={"Cache-Control": "no-cache"})

    app.add_api_route("/docs", docs, methods=["GET"], include_in_schema=False)
    app.mount("/docs/static", StaticFiles(directory=STATIC_DIR), name="docs-static")
