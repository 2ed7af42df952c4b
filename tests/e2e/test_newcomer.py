"""A newcomer follows the README's quick start literally, in an empty folder: `make run` (the
admin and the demo executor), the password change, an API token, the demo job, then their
own executor: its group by appname, the executor token, the README's `jobs.py`, a job by
appname, a successful run and its log. No traceback, no failed run.

Every command run here is asserted to be in the README, and `jobs.py` is read from it, so the
README and this test cannot drift apart. Only the ports differ (free ones, not 8080/9999).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from tests.e2e.admin_nodes import free_port

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

README = Path(__file__).resolve().parents[2] / "README.md"
LIMIT_S = 90.0
NEW_PASSWORD = "a-newcomer-password-42"


def readme_block(text: str, after: str, language: str) -> str:
    """The first ``language`` fenced block after the line containing ``after``."""
    start = text.index(after)
    match = re.compile(rf"^```{language}\n(.*?)^```", re.S | re.M).search(text, start)
    assert match, f"no {language} block after {after!r} in README.md"
    return match.group(1)


def readme_commands(text: str) -> list[str]:
    """Every command line of the quick start's sh blocks (comments dropped)."""
    quick_start = text[text.index("## Quick start"):text.index("## Production")]
    lines: list[str] = []
    for block in re.findall(r"^```sh\n(.*?)^```", quick_start, re.S | re.M):
        lines += [line.split("  #")[0].strip() for line in block.splitlines() if line.strip()]
    return lines


class Newcomer:
    """Runs README commands in ``folder`` with the shell state (exported variables) they build."""

    def __init__(self, folder: Path, readme: str, env: dict[str, str]) -> None:
        self.folder = folder
        self.commands = readme_commands(readme)
        self.env = env
        self.outputs: list[str] = []

    def run(
        self, line: str, *, readme: bool = True, **placeholders: object
    ) -> subprocess.CompletedProcess[str]:
        """Run ``line`` (in the README unless ``readme=False``: the test's own checks) with
        placeholders such as RUN_ID filled."""
        assert not readme or line in self.commands, f"{line!r} is not a quick start command of the README"
        for name, value in placeholders.items():
            line = line.replace(name, str(value))
        argv = shlex.split(line)
        assert argv[0] == "jobring"
        done = subprocess.run([sys.executable, "-m", "jobring.cli", *argv[1:]], cwd=self.folder, env=self.env,
                              capture_output=True, text=True, timeout=120)
        self.outputs.append(done.stdout + done.stderr)
        assert done.returncode == 0, f"{line}: exit {done.returncode}\n{done.stdout}{done.stderr}"
        return done

    def export(self, line: str, **replacements: object) -> str:
        """``export NAME=$(jobring ...)``: run the inner command and keep its output in NAME;
        ``export NAME=VALUE``: keep VALUE (with ``replacements``: the test's ports)."""
        assert line in self.commands, f"{line!r} is not a quick start command of the README"
        plain = re.fullmatch(r"export (\w+)=([^$\s]+)", line)
        if plain:
            value = plain.group(2)
            for old, new in replacements.items():
                value = value.replace(old, str(new))
            self.env[plain.group(1)] = value
            return value
        match = re.fullmatch(r"export (\w+)=\$\((jobring .*)\)", line)
        assert match, line
        inner = match.group(2)
        self.commands.append(inner)
        value = self.run(inner).stdout.strip()
        self.env[match.group(1)] = value
        return value

    def json(self, line: str, **placeholders: object) -> Any:
        """The README command with ``--json`` added (what a script would read)."""
        self.commands.append(line + " --json")
        return json.loads(self.run(line + " --json", **placeholders).stdout)


def wait_for(what: str, check: Callable[[], Any], *procs: tuple[subprocess.Popen[bytes], Path]) -> Any:
    deadline = time.monotonic() + LIMIT_S
    while True:
        for proc, log in procs:
            if proc.poll() is not None:
                raise AssertionError(f"{proc.args} exited {proc.returncode}:\n{log.read_text()}")
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            logs = "\n".join(log.read_text() for _, log in procs)
            raise AssertionError(f"{what} not seen in time:\n{logs}")
        time.sleep(0.2)  # a real admin and executor: no event to wait on from here


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    children = psutil.Process(proc.pid).children(recursive=True)
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    for child in children:
        if child.is_running():
            child.kill()


def healthy(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def test_the_readme_quick_start_works_for_a_newcomer(tmp_path: Path) -> None:
    readme = README.read_text()
    admin_port, demo_port, executor_port = free_port(), free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBRING_")}
    env["JOBRING_URL"] = f"http://127.0.0.1:{admin_port}"  # the README's admin is on the default 8080
    me = Newcomer(tmp_path, readme, env)

    # make run (= jobring run) in the first shell.
    makefile = (README.parent / "Makefile").read_text()
    assert "make run" in readme and "$(BIN)/jobring run" in makefile
    assert "pip install --quiet -e '.[admin]'" in makefile  # the admin's libraries are an extra
    run_log = tmp_path / "make-run.log"
    with run_log.open("wb") as out:
        admin = subprocess.Popen(
            [sys.executable, "-m", "jobring.cli", "run", "--port", str(admin_port),
             "--demo-port", str(demo_port)],
            cwd=tmp_path, env={k: v for k, v in env.items() if k != "JOBRING_URL"}, stdout=out,
            stderr=subprocess.STDOUT,
        )
    executor: subprocess.Popen[bytes] | None = None
    try:
        wait_for("the admin", lambda: healthy(admin_port), (admin, run_log))
        generated = wait_for("the generated password",
                             lambda: re.search(r"generated password: (\S+)", run_log.read_text()),
                             (admin, run_log)).group(1)

        # The second shell.
        env.update(JOBRING_PASSWORD=generated, JOBRING_NEW_PASSWORD=NEW_PASSWORD)
        me.run("jobring password")
        env["JOBRING_PASSWORD"] = NEW_PASSWORD
        me.export("export JOBRING_TOKEN=$(jobring tokens create laptop --user admin)")
        assert "hello" in me.run("jobring jobs list").stdout
        me.run("jobring jobs start 1")
        demo_runs = wait_for("a successful demo run", lambda: [r for r in me.json(
            "jobring runs list --job 1")["items"] if r["handle_code"] == 200], (admin, run_log))
        me.run("jobring runs list --job 1")
        wait_for("the demo run's log", lambda: "hello from jobring" in me.run(
            "jobring runs log RUN_ID", RUN_ID=demo_runs[-1]["id"]).stdout, (admin, run_log))

        # Their own executor.
        me.run('jobring groups add my-app "My app"')
        me.export("export JOBRING_EXECUTOR_ACCESS_TOKEN=$(jobring groups token my-app)")
        me.export("export JOBRING_EXECUTOR_ADMIN_ADDRESSES=http://127.0.0.1:8080/xxl-job-admin/",
                  **{"8080": admin_port})
        code = readme_block(readme, "Save as `jobs.py`", "python")
        # The code leaves the port and the admin to the environment (issue 25, item 20): the
        # test's free port comes in as a user's would, through JOBRING_EXECUTOR_PORT.
        assert "port=" not in code and "admin_addresses=" not in code
        env["JOBRING_EXECUTOR_PORT"] = str(executor_port)
        (tmp_path / "jobs.py").write_text(code)
        assert "python jobs.py &" in me.commands
        executor_log = tmp_path / "jobs-py.log"
        with executor_log.open("wb") as out:
            executor = subprocess.Popen([sys.executable, "jobs.py"], cwd=tmp_path, env=env, stdout=out,
                                        stderr=subprocess.STDOUT)
        wait_for("the executor registered", lambda: f"registered as http://127.0.0.1:{executor_port}/"
                 in executor_log.read_text(), (admin, run_log), (executor, executor_log))
        assert f"listening on 127.0.0.1:{executor_port}" in executor_log.read_text()

        added = me.run('jobring jobs add --group my-app --desc "say hello" --handler hello --param world '
                       "--fix-rate 30 --start")
        job_id = int(re.match(r"created job (\d+) \(running", added.stdout).group(1))  # type: ignore[union-attr]
        me.run("jobring jobs trigger JOB_ID", JOB_ID=job_id)

        def my_success() -> Any:
            runs = me.json("jobring runs list --group my-app")["items"]
            return [r for r in runs if r["handle_code"] == 200]

        procs = ((admin, run_log), (executor, executor_log))
        run = wait_for("a successful run of my job", my_success, *procs)[0]
        assert "success" in me.run("jobring runs list --group my-app").stdout
        wait_for("my run's log", lambda: "hello, params=world" in me.run(
            "jobring runs log RUN_ID", RUN_ID=run["id"]).stdout, (admin, run_log), (executor, executor_log))

        failed = json.loads(me.run("jobring runs list --status fail --json", readme=False).stdout)
        assert failed["total"] == 0, failed
    finally:
        if executor is not None:
            stop(executor)
        stop(admin)
    everything = "\n".join([run_log.read_text(), *me.outputs,
                            executor_log.read_text() if executor is not None else ""])
    assert "Traceback" not in everything, everything
    assert "refused the access token" not in everything
