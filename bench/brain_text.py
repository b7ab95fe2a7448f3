"""How the offline model's reading scales with hostile text: 200 kB of pathological emails.

    python bench/brain_text.py            # 200 kB per shape, prints a table, asserts the bound
    python bench/brain_text.py --kb 50    # smaller (what `bench/run.py --quick` uses)

The offline stand-in reads every request's whole conversation with regular expressions; one
that backtracks quadratically turns an email of 20,000 spaces into 15 s of CPU, and since the
stand-in runs inside the page's process, every other ticket waits. Each shape below is fed to
the brain at three points of a ticket (the first request, the request after the order and the
policy were looked up, where the email is read line by line, and the simulated customer's
turn) and timed against ordinary prose of the same size measured in the same run, so the bound
is a ratio and holds on a slow or busy machine: a linear reader stays within a small factor of
ordinary prose, a quadratic one is hundreds of times slower at this size.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from benchlib import DATA, email_for  # noqa: E402

from offline_model import brain  # noqa: E402
from refund_agent.desk.shop import Shop  # noqa: E402
from refund_agent.desk.tools import (  # noqa: E402
    CheckRefundPolicy,
    LookupOrder,
    ShopTools,
    tool_schemas,
)

# A pathological text's time may be at most this many times that of ordinary prose of the
# same size. Linear reading measures 0.3x to 3x here; the quadratic patterns this guards
# against measured 1,000x and more at 200 kB.
BOUND = 10.0
ORDER = "A1043"
SENDER = "maya.chen@example.com"

# Shapes of text that make regular expressions backtrack or rescan: runs of one character,
# repeated words and phrases, lines without breaks, deep quoting, and near-misses of the
# lexicon's longer patterns. Each takes the size in characters.
SHAPES: dict[str, Callable[[int], str]] = {
    "spaces": lambda n: " " * n,
    "tabs": lambda n: "\t" * n,
    "newline+space": lambda n: "\n " * (n // 2),
    "crlf": lambda n: "\r\n" * (n // 2),
    "exclamation marks": lambda n: "!" * n + "x",
    "full stops": lambda n: "." * n + "x",
    "commas and spaces": lambda n: ", " * (n // 2),
    "a repeated word": lambda n: "lamp " * (n // 5),
    "a repeated conjunction": lambda n: " and" * (n // 4),
    "one long word": lambda n: "a" * n,
    "one long line of words": lambda n: ("word " * (n // 5)).replace(" ", "-"),
    "deep quoting": lambda n: "> " * (n // 2) + "broken",
    "nested quotes": lambda n: '"' * (n // 2) + "x" + "'" * (n // 2),
    "from: headers": lambda n: "From:" * (n // 5),
    "chang... (change of mind)": lambda n: "chang" * (n // 5),
    "not not not": lambda n: "not " * (n // 4),
    "digits": lambda n: "A" + "1" * n,
    "dollar amounts": lambda n: "$" + "1," * (n // 2),
    "refund of $": lambda n: "refund of $1" * (n // 12),
    "hash signs": lambda n: "#" * n,
    "role-play": lambda n: "roleplay" * (n // 8),
    # The reader's own scans (offline_model/reader.py): HTML, notes, claims, listings.
    "html tags": lambda n: "<p>" * (n // 3),
    "unclosed tags": lambda n: "<p" + "<" * n,
    "unclosed comments": lambda n: "<!--" * (n // 4),
    "open brackets": lambda n: "[" * n + "]",
    "claim words": lambda n: "not broken fine " * (n // 16),
    "dotted listing": lambda n: "lamp " + "." * n + " $1.00",
}


def _call(call_id: str, name: str, args: dict[str, Any], output: dict[str, Any]) -> list[dict]:
    return [{"type": "function_call", "call_id": call_id, "name": name,
             "arguments": json.dumps(args)},
            {"type": "function_call_output", "call_id": call_id, "output": json.dumps(output)}]


def conversations(text: str, shop: Shop) -> dict[str, list[dict[str, Any]]]:
    """The three requests of a ticket that read the customer's words, with ``text`` in them."""
    # No From: header before the text, so the search for the customer's name reads it all.
    email = f"{text}\n\nMy order is {ORDER}.\nFrom: Maya Chen <{SENDER}>"
    tools = ShopTools(shop, SENDER, lambda order_id: {})
    looked_up = _call("call_1", "lookup_order", {"order_id": ORDER},
                      tools.lookup_order(LookupOrder(order_id=ORDER)))
    policy = _call("call_2", "check_refund_policy", {"order_id": ORDER},
                   tools.check_refund_policy(CheckRefundPolicy(order_id=ORDER)))
    system = {"role": "system", "content": "You are the shop's refund desk."}
    return {
        "first request": [system, {"role": "user", "content": email}],
        "after the policy": [system, {"role": "user", "content": email}, *looked_up, *policy],
        "simulated customer": [{"role": "user", "content":
                                "--- Email from the customer ---\n" + email
                                + "\n--- Email from support ---\nHi Maya, " + text + "\n"}],
    }


def time_once(conversation: list[dict[str, Any]], tools: list[dict[str, Any]]) -> float:
    started = time.perf_counter()
    brain.respond(conversation, tools)
    return time.perf_counter() - started


def time_text(text: str, shop: Shop, reps: int) -> dict[str, float]:
    """Seconds per request kind (the best of ``reps``: the least disturbed by other load)."""
    desk_tools = tool_schemas()
    out = {}
    for kind, conversation in conversations(text, shop).items():
        tools = [] if kind == "simulated customer" else desk_tools
        out[kind] = min(time_once(conversation, tools) for _ in range(reps))
    return out


def prose(n: int) -> str:
    """Ordinary email text of about ``n`` characters: a normal email, repeated."""
    body = email_for(ORDER)
    return (body + "\n\n") * (n // (len(body) + 2) + 1)


def bench_brain(kb: int = 200, reps: int = 2) -> dict[str, Any]:
    """Time every shape against ordinary prose of the same size; see the module's text."""
    shop = Shop(DATA)
    n = kb * 1000
    normal = time_text(email_for(ORDER), shop, reps=5)
    baseline = time_text(prose(n), shop, reps)
    shapes = []
    for name, make in SHAPES.items():
        seconds = time_text(make(n), shop, reps)
        ratio = max(seconds[k] / max(baseline[k], 1e-4) for k in seconds)
        shapes.append({"shape": name, "ms": {k: round(v * 1000, 2) for k, v in seconds.items()},
                       "worst_ratio_to_prose": round(ratio, 2)})
    worst = max(shapes, key=lambda s: s["worst_ratio_to_prose"])
    return {"kb": kb, "bound": BOUND,
            "normal_email_ms": {k: round(v * 1000, 3) for k, v in normal.items()},
            "prose_ms": {k: round(v * 1000, 2) for k, v in baseline.items()},
            "shapes": shapes, "worst": worst["shape"],
            "worst_ratio": worst["worst_ratio_to_prose"],
            "ok": worst["worst_ratio_to_prose"] <= BOUND}


def check(result: dict[str, Any]) -> None:
    """Fail loudly when a shape is super-linear (above the bound)."""
    if not result["ok"]:
        raise AssertionError(
            f"The offline brain read {result['kb']} kB of {result['worst']!r} "
            f"{result['worst_ratio']:.0f}x slower than ordinary prose of the same size "
            f"(bound {result['bound']:g}x): a pattern in offline_model/brain.py is "
            "super-linear.")


def rows(result: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    normal = max(result["normal_email_ms"].values())
    prose_ms = max(result["prose_ms"].values())
    out = [("brain", f"a normal email / {result['kb']} kB of ordinary prose, slowest request",
            f"{normal:.2f} / {prose_ms:.0f} ms", "")]
    slowest = max(result["shapes"], key=lambda s: max(s["ms"].values()))
    out.append(("brain", f"{len(result['shapes'])} pathological shapes of {result['kb']} kB: "
                f"worst vs prose ({result['worst']}); slowest ({slowest['shape']})",
                f"{result['worst_ratio']:.1f}x; {max(slowest['ms'].values()):.0f} ms",
                f"<= {result['bound']:g}x"))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kb", type=int, default=200, help="size of each pathological text")
    p.add_argument("--reps", type=int, default=2, help="timings per request (the best counts)")
    p.add_argument("--json", type=Path, help="save the results here")
    args = p.parse_args(argv)
    result = bench_brain(args.kb, args.reps)
    for s in result["shapes"]:
        ms = " / ".join(f"{v:.0f}" for v in s["ms"].values())
        print(f"{s['shape']:<28} {ms:>20} ms   {s['worst_ratio_to_prose']:6.2f}x prose")
    print(f"{'ordinary prose':<28} "
          f"{' / '.join(f'{v:.0f}' for v in result['prose_ms'].values()):>20} ms")
    print(f"{'a normal email':<28} "
          f"{' / '.join(f'{v:.2f}' for v in result['normal_email_ms'].values()):>20} ms")
    print("(first request / after the policy / simulated customer; best of "
          f"{args.reps})")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    check(result)
    print(f"worst: {result['worst']}, {result['worst_ratio']:.2f}x prose (bound "
          f"{BOUND:g}x): ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
