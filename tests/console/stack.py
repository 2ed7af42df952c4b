"""A real admin process (SQLite, generated admin password) and a real executor process on
free loopback ports, for the console's browser tests and the screenshot script."""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.e2e.admin_nodes import free_port

REPO = Path(__file__).resolve().parents[2]
DIST_INDEX = REPO / "src" / "jobring" / "admin" / "console" / "dist" / "index.html"
CHROMIUM = Path("/usr/bin/chromium")
# A small CJK font, so Chinese pages render (in tests and screenshots) on a bare server.
CJK_FONT = Path("/usr/share/fonts/truetype/wqy/wqy-microhei.ttc")
APP_NAME = "console-e2e"
NEW_PASSWORD = "Console-e2e-Passw0rd!"
START_LIMIT_S = 90.0
CLI = [sys.executable, "-c", "import sys; from jobring.cli import main; sys.exit(main())"]


def ensure_chromium() -> str:
    """Debian's chromium (and a CJK font), installed with apt when missing (never a browser
    download)."""
    if CHROMIUM.exists() and CJK_FONT.exists():
        return str(CHROMIUM)
    # Parallel test workers install at most once at a time (apt holds dpkg's lock).
    with open(tempfile.gettempdir() + "/jobring-apt.lock", "w") as gate:
        fcntl.flock(gate, fcntl.LOCK_EX)
        return _install_chromium()


def _install_chromium() -> str:
    if not CHROMIUM.exists() or not CJK_FONT.exists():
        if os.geteuid() != 0:
            if not CHROMIUM.exists():
                raise RuntimeError("the browser tests need Debian's chromium: apt-get install chromium")
            return str(CHROMIUM)
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        install = ["apt-get", "install", "-y", "--no-install-recommends", "chromium", "fonts-wqy-microhei"]
        if subprocess.run(install, env=env, capture_output=True).returncode != 0:
            subprocess.run(["apt-get", "update"], env=env, check=True, capture_output=True)
            subprocess.run(install, env=env, check=True, capture_output=True)
    return str(CHROMIUM)


def ensure_console_built() -> None:
    """Build the console when there is no build (make test builds it first)."""
    if DIST_INDEX.exists():
        return
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError("building the console needs node 20+ and npm")
    console = REPO / "console"
    if not (console / "node_modules").exists():
        subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=console, check=True)
    subprocess.run([npm, "run", "build"], cwd=console, check=True)


def _wait(check: Any, what: str, log: Path, limit_s: float = START_LIMIT_S) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise AssertionError(f"{what} not ready in time:\n{log.read_text(errors='replace')}")


@dataclass
class Stack:
    """The admin and the executor; ``password`` is the admin's current password. The
    executor starts once its group exists (it needs the group's own executor token)."""

    workdir: Path
    port: int = 0
    generated_password: str = ""
    password: str = ""
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("JOBRING_")}
        env.update(JOBRING_GLUE_ENABLED="true", JOBRING_NODE_ID="console-e2e")
        admin_log = self.workdir / "admin.log"
        with admin_log.open("wb") as out:
            self.procs.append(subprocess.Popen(
                [*CLI, "admin", "--port", str(self.port),
                 "--database-url", f"sqlite:///{self.workdir / 'console.db'}"],
                stdout=out, stderr=subprocess.STDOUT, env=env, cwd=self.workdir,
            ))
        _wait(self._healthy, "the admin", admin_log)
        found = re.search(r"generated password: (\S+)", admin_log.read_text())
        assert found, admin_log.read_text()
        self.generated_password = self.password = found.group(1)

    def ensure_executor(self) -> None:
        """Start the executor process (once) with its group's own executor token."""
        if len(self.procs) > 1:
            return
        group = self.group_id()
        with self.api() as http:
            token = http.get(f"/groups/{group}/access-token").json()["access_token"]
        env = {k: v for k, v in os.environ.items() if not k.startswith("JOBRING_")}
        executor_log = self.workdir / "executor.log"
        with executor_log.open("wb") as out:
            # --token=...: a generated token starts with "-" one time in 64, and argparse would
            # take "--token -x..." for a missing value (4 browser tests failed at once on it).
            self.procs.append(subprocess.Popen(
                [*CLI, "executor", "tests.console.executor_app:executor",
                 "--app-name", APP_NAME, "--admin", f"{self.url}/xxl-job-admin/", f"--token={token}",
                 "--host", "127.0.0.1", "--port", str(free_port()), "--ip", "127.0.0.1",
                 "--log-path", str(self.workdir / "executor-logs"), "--beat-interval", "2"],
                # REPO for tests.console.executor_app; a PYTHONPATH given to the tests is kept, so
                # the executor runs the same jobring as the admin (a worktree's, not the installed one).
                stdout=out, stderr=subprocess.STDOUT, cwd=REPO,
                env={**env, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))},
            ))

    def _healthy(self) -> bool:
        if self.procs[0].poll() is not None:
            raise AssertionError(f"the admin exited {self.procs[0].returncode}")
        try:
            return httpx.get(self.url + "/health", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()

    def ready_password(self) -> str:
        """The admin's password after the forced change (made here when no test made it)."""
        if self.password == self.generated_password:
            with httpx.Client(base_url=self.url + "/api/v1") as http:
                me = http.post("/auth/login", json={"username": "admin", "password": self.password})
                me.raise_for_status()
                change = {"current_password": self.password, "new_password": NEW_PASSWORD}
                csrf = {"X-CSRF-Token": me.json()["csrf_token"]}
                http.post("/users/me/password", headers=csrf, json=change).raise_for_status()
            self.password = NEW_PASSWORD
        return self.password

    @contextmanager
    def api(self) -> Iterator[httpx.Client]:
        """An admin API client (logged in with a session; sends the CSRF header)."""
        with httpx.Client(base_url=self.url + "/api/v1", timeout=10) as http:
            me = http.post("/auth/login", json={"username": "admin", "password": self.ready_password()})
            me.raise_for_status()
            http.headers["X-CSRF-Token"] = me.json()["csrf_token"]
            yield http

    def group_id(self) -> int:
        """The executor's group (created through the API when no test created it)."""
        with self.api() as http:
            found = http.get("/groups", params={"app_name": APP_NAME}).json()["items"]
            if found:
                return int(found[0]["id"])
            made = http.post("/groups", json={"app_name": APP_NAME, "title": "Console e2e"})
            made.raise_for_status()
            return int(made.json()["id"])

    def wait_executor_online(self, group_id: int) -> None:
        self.ensure_executor()
        with self.api() as http:
            def online() -> bool:
                # Registered (online) and in the group's address list, which routing uses.
                group = http.get(f"/groups/{group_id}").json()
                return bool(group["online"]) and bool(group["addresses"])
            _wait(online, "the executor's registration", self.workdir / "executor.log", 30)
