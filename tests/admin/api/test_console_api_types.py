"""The console's API types are generated from the API's OpenAPI document: regenerating both
must change nothing, so the console cannot drift from the API (run `make console-types`
after changing the API)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from jobring.admin.api.management.openapi_dump import dump

CONSOLE = Path(__file__).resolve().parents[3] / "console"
FIX = "run: make console-types"


def test_committed_openapi_document_is_current() -> None:
    committed = (CONSOLE / "openapi.json").read_text(encoding="utf-8")
    assert json.loads(committed) == json.loads(dump()), f"console/openapi.json is stale; {FIX}"


@pytest.mark.timeout(180)
def test_generated_types_are_current(tmp_path: Path) -> None:
    generator = CONSOLE / "node_modules" / ".bin" / "openapi-typescript"
    if not generator.exists():
        npm = shutil.which("npm")
        assert npm, "npm is needed to check the console's API types (node 20+ and npm)"
        subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=CONSOLE, check=True, capture_output=True)
    document = tmp_path / "openapi.json"
    document.write_text(dump(), encoding="utf-8")
    out = tmp_path / "schema.d.ts"
    command = [str(generator), str(document), "-o", str(out)]
    subprocess.run(command, cwd=CONSOLE, check=True, capture_output=True)
    committed = (CONSOLE / "src" / "api" / "schema.d.ts").read_text(encoding="utf-8")
    assert out.read_text(encoding="utf-8") == committed, f"console/src/api/schema.d.ts is stale; {FIX}"
