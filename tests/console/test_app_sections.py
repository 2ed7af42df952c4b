"""The admin answers a browser's load of every console page with the app and status 200
(``APP_SECTIONS``); a page the router has but the list lacks loads with status 404, which a
reload of that page shows as an error. This test fails on such drift."""

from __future__ import annotations

import re
from pathlib import Path

from jobring.admin.console import APP_SECTIONS

ROUTER = Path(__file__).parents[2] / "console" / "src" / "router.ts"


def test_every_router_section_is_served_by_the_admin() -> None:
    paths = re.findall(r'\{ path: "(/[^"]*)"', ROUTER.read_text(encoding="utf-8"))
    assert len(paths) > 10
    sections = {p.split("/")[1] for p in paths if p != "/" and not p.startswith("/:")}
    assert sections == set(APP_SECTIONS)
