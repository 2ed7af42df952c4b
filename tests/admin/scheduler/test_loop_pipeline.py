"""The scheduling loop is a one-way pipeline: leases -> held -> timer -> sender.

A stage's module imports only modules of its own or earlier stages (what a later stage
must tell an earlier one goes through an interface the earlier stage owns, or as data the
loop hands on): the lease keeper knows nothing of the held set, the held set nothing of the
timer or the sender, the timer nothing of the sender. Only ``loop.py`` composes them all.
"""

from __future__ import annotations

import ast
from pathlib import Path

import jobring.admin.loop as loop_pkg

_LOOP = Path(loop_pkg.__file__).parent
_PREFIX = "jobring.admin.loop."

# Each module of the package and its place, earliest first. "base" is what every stage
# shares (ports, settings, timers, the loop context...); "beside" are the modules next to
# the loop (adapters over the store, liveness, delayed fires, the overlap gate), which may
# use the base and each other but no stage.
STAGES = ("base", "leases", "held", "timer", "sender", "loop")
PLACE = {
    "ports": "base", "config": "base", "timers": "base", "ahead": "base", "timed": "base",
    "catchup": "base", "context": "base",
    "leases": "leases",
    "held": "held", "adoption": "held",
    "timer": "timer",
    "readahead": "sender", "fence": "sender", "advance": "sender", "firing": "sender",
    "loop": "loop",
    "adapters": "beside", "timing_book": "beside", "delayed": "beside", "liveness": "beside",
    "overlap": "beside",
}


def loop_imports(source: str) -> set[str]:
    """The modules of the loop package that ``source`` imports (anywhere, type-checking
    blocks included: a type is a dependency too)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            if node.level:
                raise AssertionError(f"relative import of {node.module!r}: the loop uses absolute imports")
            names = [node.module]
        else:
            continue
        found.update(n.removeprefix(_PREFIX).split(".")[0] for n in names if n.startswith(_PREFIX))
    return found


def backward_imports(sources: dict[str, str]) -> list[str]:
    """``module -> imported`` for every import against the pipeline's direction."""
    wrong: list[str] = []
    for module, source in sorted(sources.items()):
        place = PLACE[module]
        for imported in sorted(loop_imports(source)):
            target = PLACE.get(imported)
            if target is None:
                wrong.append(f"{module} -> {imported} (not placed)")
            elif place == "beside":
                if target not in ("base", "beside"):
                    wrong.append(f"{module} -> {imported} (beside the loop, may use only its base)")
            elif target == "beside" or STAGES.index(target) > STAGES.index(place):
                wrong.append(f"{module} -> {imported} ({place} may not import {target})")
    return wrong


def _sources() -> dict[str, str]:
    return {p.stem: p.read_text() for p in _LOOP.glob("*.py") if p.stem != "__init__"}


def test_every_loop_module_has_a_place_in_the_pipeline() -> None:
    assert set(_sources()) == set(PLACE)


def test_the_stages_import_only_their_own_and_earlier_stages() -> None:
    assert backward_imports(_sources()) == []


def test_the_loop_modules_import_no_circle() -> None:
    sources = _sources()
    graph = {m: loop_imports(s) - {m} for m, s in sources.items()}
    done: set[str] = set()

    def visit(module: str, path: tuple[str, ...]) -> None:
        assert module not in path, f"import circle: {' -> '.join((*path, module))}"
        if module in done:
            return
        for imported in graph.get(module, ()):
            visit(imported, (*path, module))
        done.add(module)

    for module in graph:
        visit(module, ())


def test_the_check_finds_an_import_against_the_flow() -> None:
    # (The rule itself, on sources made up for it: a later stage reached from an earlier one.)
    assert backward_imports({
        "leases": "from jobring.admin.loop.held import HeldSet\n",
        "held": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import jobring.admin.loop.firing\n",
        "timer": "def late():\n    from jobring.admin.loop.advance import AdvanceWriter\n",
        "adapters": "from jobring.admin.loop.leases import LeaseKeeper\n",
        "firing": "from jobring.admin.loop.timer import FireTimer\nimport jobring.admin.loop.nowhere\n",
    }) == [
        "adapters -> leases (beside the loop, may use only its base)",
        "firing -> nowhere (not placed)",
        "held -> firing (held may not import sender)",
        "leases -> held (leases may not import held)",
        "timer -> advance (timer may not import sender)",
    ]
