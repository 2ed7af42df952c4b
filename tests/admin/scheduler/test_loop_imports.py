"""The scheduling loop and its ports import no adapter (HTTP clients, trigger, SQL store)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import jobring.admin.loop as loop_pkg

_LOOP = Path(loop_pkg.__file__).parent
# The loop's parts: what they may import from jobring is each other, core, pure records and
# the background task set
# (adapters.py, timing_book.py, delayed.py and liveness.py beside them work over the store).
_LOOP_PARTS = ("ports", "loop", "config", "context", "ahead", "held", "adoption", "leases", "readahead",
               "timer", "firing", "fence", "advance", "timers", "timed", "catchup")
_ALLOWED = tuple(f"jobring.admin.loop.{name}" for name in _LOOP_PARTS) + (
    "jobring.core.", "jobring.admin.store.records", "jobring.background")
_ADAPTERS = ("aiohttp", "httpx", "jobring.admin.trigger", "jobring.admin.dispatch", "jobring.http1",
             "jobring.admin.loop.adapters")


def _imports(path: Path) -> list[str]:
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module is not None and node.level == 0:
            names.append(node.module)
    return names


def test_loop_parts_import_only_each_other_core_and_records() -> None:
    wrong = {
        f"{name}.py: {module}"
        for name in _LOOP_PARTS
        for module in _imports(_LOOP / f"{name}.py")
        if (module.startswith("jobring") and not module.startswith(_ALLOWED))
        or module.split(".")[0] in ("sqlalchemy", "aiohttp", "httpx")
    }
    assert not wrong


def test_importing_the_loop_loads_no_http_client_nor_trigger_side() -> None:
    # (The store package's __init__ loads SQLAlchemy when records are imported: the AST
    # check above is what keeps the loop itself off it.)
    code = ("import sys, jobring.admin.loop.loop\n"
            f"print(sorted(m for m in sys.modules if m.startswith({_ADAPTERS!r})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=30)
    assert out.stdout.strip() == "[]"
