"""Regenerate the README's pictures of the helpdesk.

    python scripts/screenshot.py [--docs docs] [--only desk|review|timeline]

It starts ``streamlit run app.py`` on a free port with a throwaway output folder and the
offline stand-in model, drives it with Debian's headless Chromium (never a downloaded
browser), and saves four PNGs:

- ``screenshot.png``: the desk. Maya's ticket from her email to the team note, with the
  "Server restarted" mark between the approval and the refund, the angry customer's refund
  waiting in the queue and the audit log showing both server processes.
- ``review.png``: the review that opens before any money moves, at 1280×800, with one line
  unticked and the amount re-priced.
- ``sign-in.png``: the desk once accounts exist: the sign-in, and an approver's limit.
- ``timeline.png``: a ticket's timeline (docs/HOW-IT-WORKS.md): a refund proposed by a terminal
  command, approved on the page "three days and four hours later" (the store's times before
  the decision are moved back by that much; the model requests take the demo's one second).
"""

from __future__ import annotations

import argparse
import io
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from PIL import Image
from playwright.sync_api import Page, sync_playwright

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
LAUNCH_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync"]
WIDTH = 1480
MAX_BYTES = 500_000


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def clean_env(output: Path, latency: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("XAI_API_KEY", "CRASH_AFTER_REFUND", "REFUND_AGENT_CRASH_AT")}
    env.update(REFUND_AGENT_OUTPUT=str(output), REFUND_AGENT_OFFLINE_LATENCY=latency,
               XAI_API_KEY="")
    return env


def start_server(port: int, output: Path, log: Path, latency: str = "0") -> subprocess.Popen:
    # Latency 0: the picture is the same at any speed, and it is taken sooner.
    env = clean_env(output, latency)
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(port),
             "--server.address", "127.0.0.1", "--server.headless", "true",
             "--browser.gatherUsageStats", "false"],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=1):
                return proc
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(0.05)
    proc.kill()
    raise SystemExit(f"streamlit did not start; see {log}")


def kill(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)


def card(page: Page, text: str):
    return page.locator("[class*='st-key-card_']").filter(has_text=text)


def fit_height(page: Page) -> None:
    """Grow the window to the page's content, since Streamlit scrolls inside its main area."""
    height = page.evaluate(
        "() => document.querySelector('[data-testid=\"stMainBlockContainer\"]').scrollHeight")
    page.set_viewport_size({"width": WIDTH, "height": int(height) + 40})


def save_png(png: bytes, out: Path) -> int:
    """Write the PNG, reduced to a 256-colour palette if it would exceed the size budget."""
    if len(png) > MAX_BYTES:
        image = Image.open(io.BytesIO(png)).convert("RGB")
        buffer = io.BytesIO()
        image.quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(
            buffer, "PNG", optimize=True)
        png = buffer.getvalue()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(png)
    return len(png)


TWO_LINES = ("Order A1043: the coffee maker arrived shattered, and honestly I also don't want "
             "the mugs anymore.")


def start_sample(page: Page, label: str) -> None:
    button = page.get_by_role("button", name=label)
    if not button.is_visible():
        page.get_by_text("New ticket: a sample, or your own email").click()
    button.click()


def desk(out: Path) -> int:
    with tempfile.TemporaryDirectory(prefix="refund-desk-") as tmp:
        output, log = Path(tmp) / "output", Path(tmp) / "streamlit.log"
        port = free_port()
        url = f"http://127.0.0.1:{port}/"
        server = start_server(port, output, log)
        try:
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
                page = browser.new_page(viewport={"width": WIDTH, "height": 1000})
                page.set_default_timeout(30_000)
                page.goto(url)
                save_name(page)

                start_sample(page, "Cracked on arrival")
                card(page, "$48.00 for order A1043").wait_for()
                # The audit table's scripts must load before the kill: a browser remembers a
                # script import that failed while the server was down.
                page.get_by_role("button", name="Download CSV").wait_for()
                kill(server)  # the restart the screenshot is about
                server = start_server(port, output, log)
                page.get_by_text(f"Server pid {server.pid}").wait_for()
                save_name(page)
                card(page, "$48.00 for order A1043").get_by_role("button",
                                                                 name="Approve…").click()
                page.get_by_role("button", name="Approve $48.00").click()
                page.get_by_text("Note for the team", exact=True).wait_for()

                start_sample(page, "Angry customer")
                card(page, "for order A1066").wait_for()
                page.locator("[class*='st-key-run_']").filter(has_text="Maya Chen").click()
                page.get_by_text("Note for the team", exact=True).wait_for()
                # A fresh session drops the "Approved ..." notice; the URL keeps the ticket
                # and the approver.
                page.reload()
                page.get_by_text("Note for the team", exact=True).wait_for()
                fit_height(page)
                page.get_by_text("Server restarted").wait_for()
                page.wait_for_timeout(1500)  # let the refresh timers settle the layout
                png = page.screenshot()
                browser.close()
        finally:
            kill(server)
    return save_png(png, out)


def save_name(page: Page) -> None:
    page.get_by_label("Your name (signs every decision in the audit log)").fill("Dana Kim")
    page.get_by_role("button", name="Save name").click()
    page.get_by_text("Deciding as").wait_for()


def review_and_sign_in(review_out: Path, sign_in_out: Path) -> tuple[int, int]:
    """The review with the mugs unticked, then the same desk once accounts exist."""
    sys.path.insert(0, str(ROOT))
    from refund_agent.desk.accounts import Accounts
    from refund_agent.desk.records import DeskStore

    with tempfile.TemporaryDirectory(prefix="refund-desk-") as tmp:
        output, log = Path(tmp) / "output", Path(tmp) / "streamlit.log"
        port = free_port()
        server = start_server(port, output, log)
        try:
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
                page = browser.new_page(viewport={"width": 1280, "height": 800})
                page.set_default_timeout(30_000)
                page.goto(f"http://127.0.0.1:{port}/")
                save_name(page)
                page.get_by_label("From (the customer's address)").fill("maya.chen@example.com")
                page.get_by_label("Name", exact=True).fill("Maya Chen")
                page.get_by_label("Email", exact=True).fill(TWO_LINES)
                page.get_by_role("button", name="Send to the agent").click()
                card(page, "$66.50 for order A1043").wait_for()
                page.wait_for_timeout(5000)   # the "Sent" toast fades
                card(page, "$66.50 for order A1043").get_by_role("button",
                                                                 name="Approve…").click()
                dialog = page.get_by_role("dialog")
                dialog.get_by_test_id("stCheckbox").filter(has_text="Stoneware mugs").click()
                dialog.get_by_text("Approving pays $48.00").wait_for()
                dialog.get_by_role("textbox").fill("The mugs were used, so they can't go back.")
                page.wait_for_timeout(800)
                review_png = page.screenshot()
                dialog.get_by_role("button", name="Cancel").click()

                accounts = Accounts(DeskStore(output / "refund-agent.sqlite3"))
                accounts.add("Ana Ruiz", "approver", "ana-password", limit=40)
                page.reload()
                page.get_by_text("Sign in to decide refunds").wait_for()
                page.get_by_label("Name", exact=True).last.fill("Ana Ruiz")
                page.get_by_label("Password", exact=True).fill("ana-password")
                page.wait_for_timeout(800)
                sign_in_png = page.screenshot()
                browser.close()
        finally:
            kill(server)
    return save_png(review_png, review_out), save_png(sign_in_png, sign_in_out)


# How long the timeline's approver "took": long enough to be a break in the chart's axis.
WAITED = 3 * 86400 + 4 * 3600


def timeline(out: Path) -> int:
    """A ticket's timeline: proposed in a terminal, approved on the page after a long wait."""
    sys.path.insert(0, str(ROOT))
    from refund_agent.models import StepKind
    from refund_agent.store import Store

    with tempfile.TemporaryDirectory(prefix="refund-desk-") as tmp:
        output, log = Path(tmp) / "output", Path(tmp) / "streamlit.log"
        # One second per model request (the page's demo pace), so the requests have a length.
        subprocess.run([sys.executable, "-m", "refund_agent", "sample"], cwd=ROOT, check=True,
                       env=clean_env(output, "1"), capture_output=True, timeout=120)
        port = free_port()
        server = start_server(port, output, log, latency="1")
        try:
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
                page = browser.new_page(viewport={"width": WIDTH, "height": 1000},
                                        device_scale_factor=2)
                page.set_default_timeout(30_000)
                page.goto(f"http://127.0.0.1:{port}/")
                save_name(page)
                card(page, "$48.00 for order A1043").get_by_role("button",
                                                                 name="Approve…").click()
                page.get_by_role("button", name="Approve $48.00").click()
                page.locator("[class*='st-key-run_']").first.click()
                page.get_by_text("Note for the team", exact=True).wait_for()
                store = Store(output / "refund-agent.sqlite3")
                (run,) = store.runs()
                decided = min(s.id for s in store.steps(run.id) if s.kind == StepKind.DECISION)
                store.execute("UPDATE steps SET at = at - ? WHERE id < ?", (WAITED, decided))
                store.execute("UPDATE approvals SET requested_at = requested_at - ?", (WAITED,))
                store.execute("UPDATE runs SET created_at = created_at - ?", (WAITED,))
                page.reload()
                chart = page.locator("[class*='st-key-timeline_chart']")
                chart.get_by_text("waited 3 d 4 h", exact=False).first.wait_for()
                page.wait_for_timeout(1500)  # let the refresh timers settle the layout
                png = chart.screenshot()
                browser.close()
        finally:
            kill(server)
    return save_png(png, out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=Path, default=ROOT / "docs")
    parser.add_argument("--only", choices=["desk", "review", "timeline"],
                        help="make only this picture (review also makes sign-in.png)")
    args = parser.parse_args()
    sizes = {}
    if args.only in (None, "desk"):
        sizes["screenshot.png"] = desk(args.docs / "screenshot.png")
    if args.only in (None, "review"):
        sizes["review.png"], sizes["sign-in.png"] = review_and_sign_in(
            args.docs / "review.png", args.docs / "sign-in.png")
    if args.only in (None, "timeline"):
        sizes["timeline.png"] = timeline(args.docs / "timeline.png")
    for name, size in sizes.items():
        print(f"Saved {args.docs / name} ({size / 1024:.0f} KB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
