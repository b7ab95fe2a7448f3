"""Draw docs/flow.png: the sequence diagram the walkthrough notebook shows near its top.

    python scripts/diagram.py [--out docs/flow.png]

One refund from the customer's email to the team's note: who talks to whom, which arrows are
committed to the store (the numbered badges are the seven durable boundaries the notebook lists),
where the run waits for a person with no process running, and which keys make the payment and
the email happen once. Only matplotlib is needed; the output is the same byte for byte on every
run with the same matplotlib.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import FancyBboxPatch  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent

ACTORS = ["Customer", "Agent\n(any process)", "Model\n(Responses API)", "Store\n(SQLite)",
          "Approver\n(a person)", "Payments\n& email"]
CUSTOMER, AGENT, MODEL, STORE, APPROVER, PAYMENTS = range(len(ACTORS))
X = [0.0, 2.2, 4.6, 7.0, 9.2, 11.4]
COLORS = {"store": "#1f6f43", "model": "#2b5797", "pay": "#8a4b08", "person": "#6b2f8a",
          "plain": "#333333"}

# (from, to, label, boundary or None, colour key, dashed)
Message = tuple[int, int, str, "int | None", str, bool]

BEFORE_PAUSE: list[Message] = [
    (CUSTOMER, AGENT, "email: \"my coffee maker arrived cracked\"", None, "plain", False),
    (AGENT, STORE, "save the run and the email", 1, "store", False),
    (AGENT, MODEL, "request 1: system prompt + email, store=True", None, "model", False),
    (MODEL, AGENT, "response 1: call lookup_order", None, "model", True),
    (AGENT, STORE, "save response id + its calls", 2, "store", False),
    (AGENT, STORE, "run the call, save its output", 3, "store", False),
    (AGENT, MODEL, "request 2: output, previous_response_id=response 1", None, "model", False),
    (MODEL, AGENT, "... check_refund_policy, then: call issue_refund(lines)", None, "model",
     True),
    (AGENT, STORE, "policy prices; pending approval + audit 'requested'; waiting",
     4, "store", False),
]
AFTER_PAUSE: list[Message] = [
    (APPROVER, STORE, "approve: compare-and-set on 'pending' + audit 'approved'", 5, "person",
     False),
    (APPROVER, AGENT, "who resumes: the approving process, a worker's claim(),\nor "
     "`refund-agent resume` / the web's start-up for runs left behind", None, "person", False),
    (AGENT, STORE, "take the run's lease (epoch + 1; every write checks it)", 7, "store", False),
    (AGENT, PAYMENTS, "refund, idempotency key = run id + call id", 6, "pay", False),
    (AGENT, STORE, "save the refund call's output + audit 'issued' (one transaction)", 3,
     "store", False),
    (AGENT, MODEL, "function_call_output(call id, decision),\nprevious_response_id = "
     "the approval's response", None, "model", False),
    (MODEL, AGENT, "call send_customer_message", None, "model", True),
    (AGENT, PAYMENTS, "email, idempotency key = run id + call id", 6, "pay", False),
    (PAYMENTS, CUSTOMER, "\"I've refunded $48.00 ...\"", None, "pay", True),
    (AGENT, STORE, "note for the team; run done, lease released", 7, "store", False),
]


def draw(out: Path) -> None:
    step = 0.7
    rows = len(BEFORE_PAUSE) + len(AFTER_PAUSE) + 3
    height = rows * step + 2.2
    fig, ax = plt.subplots(figsize=(13, height * 0.62))
    ax.set_xlim(-1.2, 12.6)
    ax.set_ylim(-height, 0.6)
    ax.axis("off")

    # Participants and their lifelines.
    for x, name in zip(X, ACTORS, strict=True):
        ax.add_patch(FancyBboxPatch((x - 0.97, -0.55), 1.94, 0.9, boxstyle="round,pad=0.04",
                                    fc="#f2f2f2", ec="#555555", lw=1.2))
        ax.text(x, -0.1, name, ha="center", va="center", fontsize=12.5, weight="bold")
        ax.plot([x, x], [-0.7, -height + 0.4], color="#999999", lw=1, ls=(0, (4, 4)),
                zorder=0)

    y = -1.25

    def arrow(m: Message) -> None:
        nonlocal y
        src, dst, label, boundary, colour, dashed = m
        c = COLORS[colour]
        if "\n" in label:
            y -= step * 0.45  # room for the second line of the label above the arrow
        ax.annotate("", xy=(X[dst], y), xytext=(X[src], y),
                    arrowprops={"arrowstyle": "-|>", "color": c, "lw": 1.6,
                                "ls": "--" if dashed else "-", "shrinkA": 2, "shrinkB": 2})
        mid = (X[src] + X[dst]) / 2
        ax.text(mid, y + 0.09, label, ha="center", va="bottom", fontsize=10.5, color=c,
                linespacing=1.0, bbox={"boxstyle": "square,pad=0.05", "fc": "white",
                                       "ec": "none", "alpha": 0.85})
        if boundary is not None:
            ax.text(X[dst] + (0.28 if dst >= src else -0.28), y, str(boundary), ha="center",
                    va="center", fontsize=9.5, weight="bold", color="white",
                    bbox={"boxstyle": "circle,pad=0.22", "fc": COLORS["store"], "ec": "none"})
        y -= step

    for m in BEFORE_PAUSE:
        arrow(m)

    # The pause: nothing runs while the approval waits.
    top = y + step * 0.45
    band = step * 1.9
    ax.add_patch(FancyBboxPatch((-1.0, top - band), 13.4, band, boxstyle="round,pad=0.02",
                                fc="#fff4d6", ec="#d9a400", lw=1))
    ax.text(5.7, top - band / 2, "WAITING: no process holds the run, the response is stored "
            "for 30 days;\na person decides in minutes or days, from any process",
            ha="center", va="center", fontsize=11.5, color="#7a5a00", style="italic")
    y = top - band - step * 0.9

    for m in AFTER_PAUSE:
        arrow(m)

    ax.text(-1.15, -height + 0.15,
            "Numbered badges: the durable boundaries (each one committed transaction; a named "
            "crash point sits at each). Dashed arrows: answers.\nAudit lines are written "
            "inside the transactions they describe (4, 5, and 3 for the payment).",
            fontsize=10, color="#555555", va="bottom")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110, metadata={"Software": None})
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "flow.png")
    args = parser.parse_args()
    draw(args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
