"""Run ``jobring.cli.main`` against the in-process admin: the CLI's blocking client runs in a
worker thread and reaches the app on the test's loop through ``LoopBridgeTransport``."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from jobring.cli import main
from jobring.cli.remote import use_transport
from tests.client.adminkit import BASE_URL, AdminEnv, LoopBridgeTransport


@dataclass(frozen=True)
class CliResult:
    code: int
    out: str
    err: str


def _main_in_thread(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exc:  # argparse refusing the command line
        return exc.code if isinstance(exc.code, int) else 1


@dataclass
class Cli:
    """``await cli("jobs", "list")``: exit code and captured output of one CLI run."""

    capsys: pytest.CaptureFixture[str]
    transport: Callable[[str], httpx.BaseTransport] | None = None
    app: Any = None  # an ASGI app on the test's loop; takes precedence over ``transport``

    async def __call__(self, *argv: str) -> CliResult:
        self.capsys.readouterr()
        factory = self.transport
        if self.app is not None:
            loop, app = asyncio.get_running_loop(), self.app
            factory = lambda url: LoopBridgeTransport(app, loop)  # noqa: E731
        if factory is None:
            code = await asyncio.to_thread(_main_in_thread, list(argv))
        else:
            with use_transport(factory):
                code = await asyncio.to_thread(_main_in_thread, list(argv))
        captured = self.capsys.readouterr()
        return CliResult(code, captured.out, captured.err)


def cli_for(env: AdminEnv, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Cli:
    """A CLI reaching ``env``'s app, with its URL and the admin's token in the environment."""
    monkeypatch.setenv("JOBRING_URL", BASE_URL)
    monkeypatch.setenv("JOBRING_TOKEN", env.token)
    return Cli(capsys, app=env.app)
