"""Fixtures of the console's browser tests: one admin + executor for the session, Debian's
chromium driven by Playwright, and a page that fails its test on any console error,
uncaught exception or CSP violation."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import (
    Browser,
    BrowserContext,
    ConsoleMessage,
    Dialog,
    Page,
    Playwright,
    expect,
    sync_playwright,
)

from tests.console.stack import Stack, ensure_chromium, ensure_console_built

VIEWPORT = {"width": 1440, "height": 900}
# Assertions wait as long as actions (Playwright's default is 5 s): on a slow machine under
# the suite's load a page that waits for argon2 (a login, a password change: two hashes)
# took longer.
expect.set_options(timeout=15_000)
# Every CSP violation as a console error naming its directive and sample (the browser's own
# message does not always reach the console, e.g. for style attributes set by scripts).
REPORT_CSP_VIOLATIONS = """
document.addEventListener("securitypolicyviolation", (e) => {
  console.error(`CSP violation: ${e.effectiveDirective} ${e.blockedURI} ${e.sample || ""}`);
}, true);
"""


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    ensure_console_built()
    stack = Stack(Path(tmp_path_factory.mktemp("console")))
    try:
        stack.start()
        yield stack
    finally:
        stack.stop()


# Module scope, not session: Playwright's sync API keeps an event loop running while it is
# open, which would stop the async tests of the modules that run after these.
@pytest.fixture(scope="module")
def playwright_session() -> Iterator[Playwright]:
    with sync_playwright() as p:
        yield p


@pytest.fixture(scope="module")
def browser(playwright_session: Playwright) -> Iterator[Browser]:
    browser = playwright_session.chromium.launch(executable_path=ensure_chromium())
    yield browser
    browser.close()


class PageErrors:
    """What the page reported: console errors/warnings and uncaught exceptions."""

    def __init__(self) -> None:
        self.messages: list[str] = []
        self.allowed: list[str] = []

    def on_console(self, message: ConsoleMessage) -> None:
        if message.type in ("error", "warning"):
            self.messages.append(f"{message.type}: {message.text}")

    def on_error(self, error: Exception) -> None:
        self.messages.append(f"uncaught: {error}")

    def on_dialog(self, dialog: Dialog) -> None:
        self.messages.append(f"dialog: {dialog.message}")
        dialog.dismiss()

    def unexpected(self) -> list[str]:
        return [m for m in self.messages if not any(a in m for a in self.allowed)]


@pytest.fixture
def errors() -> PageErrors:
    return PageErrors()


@pytest.fixture
def context(browser: Browser) -> Iterator[BrowserContext]:
    context = browser.new_context(viewport=VIEWPORT, locale="en-US", timezone_id="Europe/Berlin")
    context.set_default_timeout(15_000)
    context.add_init_script(REPORT_CSP_VIOLATIONS)
    yield context
    context.close()


@pytest.fixture
def page(context: BrowserContext, errors: PageErrors) -> Iterator[Page]:
    page = context.new_page()
    page.on("console", errors.on_console)
    page.on("pageerror", errors.on_error)
    page.on("dialog", errors.on_dialog)
    yield page
    assert errors.unexpected() == [], "the console reported errors (CSP violations included)"


def login(
    page: Page, stack: Stack, username: str = "admin", password: str | None = None, path: str = "/"
) -> None:
    page.goto(stack.url + path)
    sign_in(page, stack, username, password)


def sign_in(page: Page, stack: Stack, username: str = "admin", password: str | None = None) -> None:
    """Fill and send the login form the page shows."""
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password or stack.ready_password())
    page.click("button[type=submit]")
    page.wait_for_selector("main#main")
