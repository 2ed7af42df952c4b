"""The console's first load stays within 250 kB of compressed JavaScript: here, every chunk
but the lazily loaded GLUE editor's (which only its page loads) counts."""

from __future__ import annotations

import gzip

from tests.console.stack import DIST_INDEX, ensure_console_built

BUDGET_BYTES = 250 * 1024


def test_first_load_javascript_budget() -> None:
    ensure_console_built()
    assets = DIST_INDEX.parent / "assets"
    chunks = [p for p in assets.glob("*.js") if not p.name.startswith("GlueView")]
    assert chunks, "no JavaScript in the console build"
    total = sum(len(gzip.compress(p.read_bytes(), 9)) for p in chunks)
    assert total <= BUDGET_BYTES, f"{total} bytes of gzipped JavaScript outside the GLUE editor"
    index = DIST_INDEX.read_text()
    assert "GlueView" not in index  # the GLUE editor is not preloaded
