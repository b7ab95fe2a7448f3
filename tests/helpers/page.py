"""The helpdesk page under Streamlit's AppTest (no browser): its fixtures and the steps a person
takes on it. AppTest runs ``app.py`` in the test's process; runs are asynchronous, so the steps
re-run the page until what they wait for shows up. And :func:`wait_until_served`, for a page
served by a real Streamlit process.

``output`` and ``store`` are fixtures: a module that uses them imports them from here.
"""

from __future__ import annotations

import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from refund_agent.config import PROJECT_ROOT
from refund_agent.desk.records import DeskStore
from refund_agent.store import Store

from .cli import DATA

APP = PROJECT_ROOT / "app.py"
TIMEOUT = 20.0
# The offline model proposes two lines for this email: POUR-GLS-01 damaged $48.00 and
# MUG-STN-2 changed_mind $18.50 (the mugs carry the $7.50 return fee).
TWO_LINE_EMAIL = ("Order A1043: the coffee maker arrived shattered, and honestly I also don't "
                  "want the mugs anymore.")


# -- helpers --------------------------------------------------------------------------------


def eventually(check: Callable[[], object], timeout: float = TIMEOUT,
               what: str | Callable[[], str] = "") -> object:
    """Poll ``check`` until it returns something truthy; fail with ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            detail = what() if callable(what) else what
            pytest.fail(f"Timed out after {timeout:.0f} s waiting for {detail or check}")
        time.sleep(0.02)


def wait_until_served(proc: subprocess.Popen, url: str, log: Path, timeout: float = 30.0) -> str:
    """Wait until the Streamlit server ``proc`` at ``url`` answers its health check (it does
    once it accepts pages); returns the answer. Fails with the end of ``log`` if the server
    exits first or does not answer within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"streamlit exited early:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url + "_stcore/health", timeout=1) as reply:
                if reply.status == 200:
                    return reply.read().decode()
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"streamlit did not start:\n{log.read_text()[-3000:]}")
        time.sleep(0.05)


def plain(text: str) -> str:
    """Markdown source without bold marks and the escapes the page adds to customer text."""
    return text.replace("\\", "").replace("**", "")


def texts(at: AppTest, *kinds: str) -> list[str]:
    kinds = kinds or ("markdown", "caption", "success", "warning", "error", "info", "toast")
    return [plain(str(el.value)) for kind in kinds for el in at.get(kind)]


def shows(at: AppTest, fragment: str, *kinds: str) -> bool:
    return any(fragment in t for t in texts(at, *kinds))


def rerun_until(at: AppTest, fragment: str, *kinds: str, timeout: float = TIMEOUT) -> AppTest:
    """Re-run the page (as its refresh timer would) until ``fragment`` is on it."""

    def check() -> bool:
        at.run()
        assert not at.exception, [e.value for e in at.exception]
        return shows(at, fragment, *kinds)

    eventually(check, timeout, lambda: f"{fragment!r} on the page; it shows {texts(at, *kinds)}")
    return at


# -- fixtures -------------------------------------------------------------------------------


@pytest.fixture
def output(tmp_path: Path, monkeypatch) -> Path:
    """Point the page at a fresh output folder; shut its worker down afterwards."""
    out = tmp_path / "output"
    monkeypatch.setenv("REFUND_AGENT_OUTPUT", str(out))
    monkeypatch.setenv("REFUND_AGENT_DATA", str(DATA))
    monkeypatch.setenv("REFUND_AGENT_OFFLINE_LATENCY", "0")
    monkeypatch.setenv("REFUND_AGENT_MAX_RETRIES", "2")
    yield out
    st.cache_resource.clear()  # releases the cached worker, which stops its threads


@pytest.fixture
def store(output: Path) -> Store:
    return DeskStore(output / "refund-agent.sqlite3")


def open_page() -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def start_damaged(at: AppTest, store: Store):
    """Click the damaged-item sample and wait for its refund card; returns the approval."""
    at.button(key="sample_damaged").click().run()
    rerun_until(at, "$48.00 for order A1043", "markdown")
    (approval,) = store.approvals("pending")
    return approval


def start_two_lines(at: AppTest, store: Store):
    """Send the email the offline model answers with a two-line refund; returns the approval."""
    at.text_input(key="mail_from").input("maya.chen@example.com")
    at.text_input(key="mail_name").input("Maya Chen")
    at.text_area(key="mail_body").input(TWO_LINE_EMAIL)
    at.button(key="mail_send").click().run()
    rerun_until(at, "$66.50 for order A1043", "markdown")
    (approval,) = store.approvals("pending")
    assert [(x.line, x.reason, x.amount_cents) for x in approval.lines] == [
        ("POUR-GLS-01", "damaged", 4800), ("MUG-STN-2", "changed_mind", 1850)]
    return approval


def box(at: AppTest, approval_id: str, line: str):
    return at.checkbox(key=f"keep_{approval_id}_{line}")


def review(at: AppTest, approval_id: str, mode: str = "approve") -> AppTest:
    """Click a card's Approve…, Ask… or Reject…: the review opens, nothing is decided yet."""
    at.button(key=f"{mode}_{approval_id}").click().run()
    assert at.session_state["review"] == {"id": approval_id, "mode": mode}
    return at


def confirm(at: AppTest, approval_id: str, note: str | None = None) -> AppTest:
    """Fill in the review's note (if given) and press its confirmation button."""
    if note is not None:
        at.text_input(key=f"note_{approval_id}").input(note)
    return at.button(key=f"confirm_{approval_id}").click().run()


def decide(at: AppTest, approval_id: str, mode: str = "approve", note: str | None = None
           ) -> AppTest:
    return confirm(review(at, approval_id, mode), approval_id, note)


def save_name(at: AppTest, name: str) -> AppTest:
    at.text_input(key="approver_input").input(name)
    return at.button(key="save_name").click().run()


# -- the page -------------------------------------------------------------------------------


# -- accounts: sign-in, limits ----------------------------------------------------------------


def add_accounts(store: Store) -> None:
    from refund_agent.desk.accounts import Accounts
    accounts = Accounts(store)
    accounts.add("Ana Ruiz", "approver", "ana-password", limit=40)
    accounts.add("Lee Park", "lead", "lee-password")


def sign_in(at: AppTest, name: str, password: str) -> AppTest:
    at.text_input(key="signin_name").input(name)
    at.text_input(key="signin_password").input(password)
    return at.button(key="sign_in").click().run()
