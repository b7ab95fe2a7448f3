"""Screenshot a section of the walkthrough as JupyterLab renders it: docs/notebook-dollars.png.

    python scripts/notebook_screenshot.py [--heading "12. A rejection"] [--out PATH]

It starts JupyterLab headless on a free port (no token, a throwaway settings folder), opens
notebooks/walkthrough.ipynb in Debian's Chromium (/usr/bin/chromium, never a downloaded
browser), and saves the page from that section's heading down (``--height`` pixels). It exists
to check by eye how markdown renders there: that dollar amounts show as text, not as LaTeX
(tests/docs/test_notebook_mutations.py checks the markdown itself), and that the diagram shows. It
also prints how many MathJax elements the rendered markdown holds, which should be 0.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
LAUNCH_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(url: str, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.3)
    raise SystemExit(f"JupyterLab did not answer at {url}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--heading", default="12. A rejection")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "notebook-dollars.png")
    parser.add_argument("--height", type=int, default=640, help="pixels below the heading")
    args = parser.parse_args()
    if not Path(CHROMIUM).exists():
        raise SystemExit(f"{CHROMIUM} is missing: apt-get install chromium")

    port = free_port()
    settings = Path(tempfile.mkdtemp(prefix="lab-settings-"))
    # No news or update checks: nothing outside this machine, and no toast over the page.
    news = settings / "@jupyterlab" / "apputils-extension"
    news.mkdir(parents=True)
    (news / "notification.jupyterlab-settings").write_text(
        '{"fetchNews": "false", "checkForUpdates": false}')
    env = {**os.environ, "JUPYTERLAB_SETTINGS_DIR": str(settings),
           "JUPYTERLAB_WORKSPACES_DIR": str(settings / "workspaces")}
    lab = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", f"--port={port}",
         "--ServerApp.ip=127.0.0.1", "--IdentityProvider.token=", "--ServerApp.password=",
         f"--ServerApp.root_dir={ROOT}", *(["--allow-root"] if os.geteuid() == 0 else [])],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(f"http://127.0.0.1:{port}/api")
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
            page = browser.new_page(viewport={"width": 1200, "height": 1000})
            page.goto(f"http://127.0.0.1:{port}/lab/tree/notebooks/walkthrough.ipynb")
            heading = page.locator(".jp-MarkdownOutput h2", has_text=args.heading).first
            # JupyterLab renders cells as they scroll into view: scroll until the heading exists.
            notebook = page.locator(".jp-WindowedPanel-outer").first
            notebook.wait_for(timeout=60_000)
            for _ in range(200):
                if heading.count():
                    break
                notebook.evaluate("el => el.scrollBy(0, 600)")
                page.wait_for_timeout(100)
            cell = heading.locator("xpath=ancestor::div[contains(@class,'jp-Cell')][1]")
            cell.evaluate("el => el.scrollIntoView({block: 'start'})")
            page.wait_for_timeout(1500)   # MathJax, if it were going to run, has run by now
            top = cell.bounding_box()
            panel = notebook.bounding_box()
            if not top or not panel:
                raise SystemExit(f"could not find the section {args.heading!r} on the page")
            args.out.parent.mkdir(parents=True, exist_ok=True)
            bottom = min(panel["y"] + panel["height"], top["y"] + args.height)
            page.screenshot(path=str(args.out), clip={
                "x": panel["x"], "y": top["y"], "width": panel["width"],
                "height": bottom - top["y"]})
            math = page.locator(".jp-MarkdownOutput mjx-container, .jp-MarkdownOutput .MathJax")
            print(f"wrote {args.out}; math elements in rendered markdown: {math.count()}")
            browser.close()
    finally:
        lab.terminate()
        lab.wait(timeout=20)


if __name__ == "__main__":
    main()
