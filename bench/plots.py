"""Draw the benchmark plots (PNG) from a results dict of ``bench/run.py``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402

SQLITE, JSON_FILE = "#1f77b4", "#d62728"


def draw(results: dict[str, Any], folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    if results.get("scale"):
        paths.append(store_scale(results, folder / "store-scale.png"))
    if results.get("bytes"):
        paths.append(bytes_per_turn(results["bytes"], folder / "bytes-per-turn.png"))
    return paths


def _caption(results: dict[str, Any]) -> str:
    m = results["machine"]
    return f"{m['nproc']} cores, {m['cpu']}, Python {m['python']} · {results['command']}"


def store_scale(results: dict[str, Any], path: Path) -> Path:
    cases = results["scale"]["cases"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 5), dpi=100)
    for design, color, label in (("sqlite", SQLITE, "SQLite store (this project)"),
                                 ("json", JSON_FILE, "one JSON file rewritten per save\n"
                                                     "(original guide; bench re-implementation)")):
        rows = sorted((c for c in cases if c["design"] == design), key=lambda c: c["runs"])
        if not rows:
            continue
        x = [c["runs"] for c in rows]
        left.plot(x, [c["approve_resume_ms"] for c in rows], "o-", color=color, label=label)
        right.plot(x, [c["list_queue_ms"] for c in rows], "o-", color=color, label=label)
        cli = [(c["runs"], c["cli_approve_ms"]) for c in rows if c.get("cli_approve_ms")]
        if cli:
            left.plot([r for r, _ in cli], [v for _, v in cli], "^:", color=color, alpha=0.7,
                      label="SQLite, `refund-agent approve` as a new process\n"
                            "(incl. Python start-up and reading the stand-ins' logs)")
    json_max = max((c["runs"] for c in cases if c["design"] == "json"), default=None)
    sqlite_max = max((c["runs"] for c in cases if c["design"] == "sqlite"), default=None)
    if json_max and sqlite_max and json_max < sqlite_max:
        left.text(0.97, 0.30, f"JSON design not run beyond {json_max:,} runs:\nits state file "
                  "would be ~1.5 GB,\nrewritten 7 times per approval", transform=left.transAxes,
                  ha="right", va="center", fontsize=7, color=JSON_FILE)
    left.set_title("Approve one refund and resume its run")
    right.set_title("List the pending queue")
    for ax in (left, right):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("finished tickets already stored")
        ax.set_ylabel("milliseconds (median)")
        ax.grid(True, which="major", alpha=0.3)
        ax.yaxis.set_major_locator(matplotlib.ticker.LogLocator(base=10, subs=(1, 2, 5)))
        ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    handles, labels = left.get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=7.5, frameon=False,
               bbox_to_anchor=(0.5, 0.04))
    fig.suptitle("Store scale (offline model at zero latency; one process unless noted)",
                 fontsize=11)
    fig.text(0.5, 0.01, _caption(results), ha="center", fontsize=7, color="#555")
    fig.tight_layout(rect=(0, 0.14, 1, 1))
    fig.savefig(path)
    plt.close(fig)
    return path


def bytes_per_turn(b: dict[str, Any], path: Path) -> Path:
    rows = [r for r in b["requests"] if r["who"] == "agent"]
    turns = [r["turn"] for r in rows]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4.2), dpi=100)
    left.plot(turns, [r["bytes"] / 1000 for r in rows], "o-", color=SQLITE,
              label="previous_response_id (what the agent sends)")
    left.plot(turns, [r["bytes_full_history"] / 1000 for r in rows], "s--", color=JSON_FILE,
              label="whole history resent (computed)")
    right.plot(turns, [r["tokens_sent"] for r in rows], "o-", color=SQLITE,
               label="in the request (previous_response_id)")
    right.plot(turns, [r["tokens_sent_full_history"] for r in rows], "s--", color=JSON_FILE,
               label="in the request, whole history resent\n(= what the model reads either way)")
    right.plot(turns, [r["cached_tokens"] for r in rows], ":", color="#2ca02c",
               label="read from the prompt cache (reported)")
    left.set_title("Request body per agent turn")
    left.set_ylabel("kB sent")
    right.set_title("Tokens per agent turn (offline estimate, 4 chars = 1)")
    right.set_ylabel("tokens")
    for ax in (left, right):
        ax.set_xlabel("agent turn (angry-customer conversation)")
        ax.set_xticks(turns)
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7.5, loc="upper left")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
