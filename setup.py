"""Build hook: a wheel carries the web console. Everything else is in pyproject.toml.

`pip wheel .` (and `pip install .`, `python -m build`) from a source checkout builds the
console (console/, Vue + Vite) into src/jobring/admin/console/dist before the package files
are collected: `npm ci` when console/node_modules is missing, `npm run build` when the build
is missing or older than a console source (the Makefile's rule). Without npm the build stops
with one message saying what to install. JOBRING_BUILD_CONSOLE=0 builds a wheel without the
console on purpose (the admin then serves its API only). Editable installs (`pip install -e
.`, `make install`) skip it: `make run` builds the console itself.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.errors import SetupError

ROOT = Path(__file__).resolve().parent
CONSOLE = ROOT / "console"
BUILT = ROOT / "src" / "jobring" / "admin" / "console" / "dist" / "index.html"


def _newest_source(folder: Path) -> float:
    newest = 0.0
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = [d for d in dirnames if d != "node_modules"]
        for name in filenames:
            newest = max(newest, (Path(dirpath) / name).stat().st_mtime)
    return newest


def console_is_current() -> bool:
    """Whether the console's build exists and no source of it is newer."""
    if not BUILT.exists():
        return False
    return not CONSOLE.is_dir() or _newest_source(CONSOLE) <= BUILT.stat().st_mtime


def build_console() -> None:
    """Build the console into the package, or stop with what to do (see the module doc)."""
    if os.environ.get("JOBRING_BUILD_CONSOLE", "").strip() == "0" or console_is_current():
        return
    if not CONSOLE.is_dir():
        raise SetupError(f"jobring: the web console is not built ({BUILT} is missing) and its sources "
                         "(console/) are not here: build the wheel from a git checkout, or set "
                         "JOBRING_BUILD_CONSOLE=0 for a wheel without the console")
    npm = shutil.which("npm")
    if npm is None:
        raise SetupError("jobring: building the wheel needs node 20+ and npm to build the web console "
                         "(console/): install them (e.g. apt install nodejs npm) and run again, or set "
                         "JOBRING_BUILD_CONSOLE=0 for a wheel without the console")
    steps = [[npm, "run", "build"]]
    if not (CONSOLE / "node_modules").is_dir():
        steps.insert(0, [npm, "ci", "--no-audit", "--no-fund"])
    for step in steps:
        print(f"jobring: building the web console: {' '.join(step[1:])} (in console/)", flush=True)
        done = subprocess.run(step, cwd=CONSOLE, check=False)
        if done.returncode != 0:
            raise SetupError(f"jobring: `npm {' '.join(step[1:])}` in console/ failed (exit "
                             f"{done.returncode}); see its output above")
    if not BUILT.exists():
        raise SetupError(f"jobring: the console build did not produce {BUILT}")


class BuildPyWithConsole(build_py):
    """build_py that builds the console first, so that package data picks up its files."""

    def run(self) -> None:
        if not getattr(self, "editable_mode", False):
            build_console()
        super().run()


setup(cmdclass={"build_py": BuildPyWithConsole})
