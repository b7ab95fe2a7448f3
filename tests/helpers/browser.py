"""The page in Chromium: ``streamlit run app.py`` as a real process (:class:`AppServer`) and the
Playwright fixtures that drive Debian's Chromium against it (never a downloaded browser).

The fixtures (``playwright``, ``context``, ``app_server``, ``server``) and the skip when
Chromium is missing (``pytestmark``) are picked up by a module that assigns them at its top.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout
from playwright.sync_api import sync_playwright

from refund_agent.config import PROJECT_ROOT

from .cli import cli_env
from .page import wait_until_served

CHROMIUM = Path("/usr/bin/chromium")
pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(),
    reason="needs Debian's Chromium at /usr/bin/chromium (apt-get install chromium); these "
           "tests never download a browser")

LAUNCH_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync"]
WAIT_MS = 30_000
CARD = "[class*='st-key-card_']"
# The offline model proposes two lines for this email: POUR-GLS-01 damaged $48.00 and
# MUG-STN-2 changed_mind $18.50.
TWO_LINE_EMAIL = ("Order A1043: the coffee maker arrived shattered, and honestly I also don't "
                  "want the mugs anymore.")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class AppServer:
    """``streamlit run app.py`` in its own process, on a fixed port so it can be restarted."""

    def __init__(self, output: Path, log: Path) -> None:
        self.output, self.log = output, log
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        self.proc: subprocess.Popen | None = None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self, timeout: float = 30.0, **extra_env: str) -> AppServer:
        env = cli_env(self.output, REFUND_AGENT_OFFLINE_LATENCY="0", **extra_env)
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "streamlit", "run", "app.py", "--server.port",
                 str(self.port), "--server.address", "127.0.0.1", "--server.headless", "true",
                 "--browser.gatherUsageStats", "false"],
                cwd=PROJECT_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        wait_until_served(self.proc, self.url, self.log, timeout)
        return self

    def kill(self) -> None:
        """SIGKILL, as a crash or a power cut would: nothing gets to clean up."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)


@pytest.fixture(scope="module")
def playwright():
    with sync_playwright() as pw:  # one per module: Playwright's sync API does not nest
        yield pw


@pytest.fixture(scope="module")
def context(playwright):
    """One Chromium and one context for the module: pages share its cache of the page's
    scripts, which saves seconds per page; each page is still its own Streamlit session."""
    chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=LAUNCH_ARGS)
    context = chromium.new_context(viewport={"width": 1500, "height": 1000})
    context.set_default_timeout(WAIT_MS)
    yield context
    context.close()
    chromium.close()


@pytest.fixture
def app_server(tmp_path: Path) -> Iterator[AppServer]:
    """A server not yet started (tests start it with the environment they need)."""
    app = AppServer(tmp_path / "output", tmp_path / "streamlit.log")
    yield app
    app.kill()


@pytest.fixture
def server(app_server: AppServer) -> AppServer:
    return app_server.start()


def open_ticket(page, row=None) -> None:
    """Click an inbox row (the first one unless ``row`` is given) until its ticket opens.

    Streamlit's frontend can drop a click that lands while the page is being drawn: an inbox
    row clicked just after the sign-in run drew it sometimes never reached the server (no
    callback ran, no rerun started; about 1 run in 5 on a loaded machine). Selecting a ticket
    is idempotent, so a second click is what a person would do and changes nothing else.
    """
    row = row if row is not None else page.locator("[class*='st-key-run_']").first
    picker = page.get_by_text("Pick a ticket in the inbox")
    for attempt in range(3):
        page.locator('[data-testid="stApp"][data-test-script-state="notRunning"]').wait_for()
        row.click()
        try:
            picker.wait_for(state="detached", timeout=5_000)
            return
        except PlaywrightTimeout:
            # Shown in the test summary, so a click the page keeps losing gets noticed.
            warnings.warn(f"an inbox click was dropped (attempt {attempt + 1}); clicking again",
                          stacklevel=2)
    raise AssertionError("three clicks on the inbox row did not open its ticket")


def sign_in(page, name: str, password: str) -> None:
    form = page.get_by_test_id("stForm").filter(has_text="Sign in to decide refunds")
    form.get_by_label("Name", exact=True).fill(name)
    form.get_by_label("Password", exact=True).fill(password)
    form.get_by_role("button", name="Sign in").click()


def open_review(page, card, button: str = "Approve…"):
    """Click a card's Approve…, Ask… or Reject…; returns the review dialog."""
    card.get_by_role("button", name=button).click()
    dialog = page.get_by_role("dialog")
    dialog.wait_for()
    return dialog
