"""The emails an eval runs: the built-in corpus (shipped in the package) or a team's own folder.

A folder holds ``emails.json`` and, optionally, ``shop/`` (a shop folder as REFUND_AGENT_DATA
takes: orders.json, shop.json, the policy). Without ``shop/`` the emails are about the shop the
desk is configured with. ``emails.json`` is ``{"emails": [EMAIL, ...]}``, each EMAIL::

    {"id": "pd-01", "group": "plain-damage", "part": "tuning",
     "from": "grace@example.net", "from_name": "Grace", "subject": "Chipped teapot",
     "body": "...",
     "expect": {"outcome": "propose", "order": "RT20581", "shipping": false,
                "lines": [{"sku": "TP-PRC-1L", "reason": "damaged", "units": 1}]}}

``expect.outcome`` is propose (the order, its lines with reason damaged or changed_mind and,
where the customer counts units of a multi-unit line, units; shipping when the policy owes it)
or ask, decline, answer: no proposal, and ``reply_matches``, a regular expression the reply
should match, with ``about`` saying in words what is expected. ``group`` and ``part`` are
optional (a team's emails default to one group and the held-out part).

The built-in corpus keeps a held-out part the offline stand-in's reader is never tuned on: see
:func:`hashed_part` and docs/EVAL.md.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config import shipped_folder
from ..desk.shop import Shop
from ..errors import ConfigError

OUTCOMES = ("propose", "ask", "decline", "answer")
PARTS = ("tuning", "held-out")
REQUIRED = ("id", "from", "subject", "body", "expect")


@dataclass(frozen=True)
class Corpus:
    """The emails of one eval and the shop they are written to."""

    emails: list[dict[str, Any]]
    shop_dir: Path | None      # None: the shop the desk is configured with
    name: str


def builtin_folder() -> Path:
    """The corpus shipped in the package (tests/corpus/ in a checkout)."""
    return shipped_folder("refund_agent.evals.brain_corpus", "tests/corpus", "emails.json")


def hashed_part(email_id: str) -> str:
    """The part the built-in corpus's first 159 emails were put in before the reader changed
    for issue 38: a third held out, by a fixed hash of the id (so nobody chose which)."""
    return "held-out" if hashlib.sha256(email_id.encode()).digest()[0] % 3 == 0 else "tuning"


def load(folder: Path | None = None) -> Corpus:
    """The built-in corpus, or the one in ``folder``; :class:`ConfigError` says what is wrong
    in one line."""
    if folder is None:
        folder, name = builtin_folder(), "the built-in corpus"
    else:
        name = str(folder)
    if not folder.is_dir():
        raise ConfigError(f"{folder} is not a folder (it should hold emails.json, and shop/ "
                          f"if the emails are to another shop than the desk's).")
    path = folder / "emails.json"
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{folder} has no emails.json (see docs/EVAL.md for its "
                          f"format).") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path} cannot be read: {exc}") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path} is not valid JSON: {exc}") from None
    emails = raw.get("emails") if isinstance(raw, dict) else None
    if not isinstance(emails, list) or not emails:
        raise ConfigError(f"{path} needs a non-empty list under \"emails\".")
    seen: set[str] = set()
    for number, email in enumerate(emails, 1):
        problem = email_problem(email)
        if problem is None and email["id"] in seen:
            problem = "its id is used twice"
        if problem:
            where = email.get("id") if isinstance(email, dict) else None
            raise ConfigError(f"{path}: email {number}"
                              + (f" ({where})" if isinstance(where, str) else "")
                              + f": {problem}.")
        seen.add(email["id"])
        email.setdefault("group", "all")
        email.setdefault("part", "held-out")
        email.setdefault("from_name", "")
    shop = folder / "shop"
    return Corpus(emails, shop if (shop / "orders.json").is_file() else None, name)


def email_problem(email: Any) -> str | None:
    """Why an email cannot be scored (its shape, not its orders: see :func:`check_orders`)."""
    if not isinstance(email, dict):
        return "not an object"
    missing = [key for key in REQUIRED if not email.get(key)]
    if missing:
        return f"missing {', '.join(missing)}"
    if not all(isinstance(email[key], str) for key in REQUIRED[:-1]):
        return "id, from, subject and body must be text"
    if email.get("part", "held-out") not in PARTS:
        return f"part must be one of {', '.join(PARTS)}"
    expect = email["expect"]
    if not isinstance(expect, dict) or expect.get("outcome") not in OUTCOMES:
        return f"expect.outcome must be one of {', '.join(OUTCOMES)}"
    if expect["outcome"] != "propose":
        if not isinstance(expect.get("reply_matches"), str) or not expect.get("about"):
            return "expect needs reply_matches (a regular expression) and about"
        try:
            re.compile(expect["reply_matches"])
        except re.error as exc:
            return f"expect.reply_matches is not a regular expression ({exc})"
        return None
    lines = expect.get("lines")
    if not isinstance(expect.get("order"), str) or not isinstance(lines, list) or not lines:
        return "a proposal needs expect.order and expect.lines"
    for line in lines:
        if not isinstance(line, dict) or not isinstance(line.get("sku"), str) or line.get(
                "reason") not in ("damaged", "changed_mind"):
            return "each expected line needs a sku and a reason (damaged or changed_mind)"
        if "units" in line and not (isinstance(line["units"], int) and line["units"] >= 1):
            return "units must be a whole number from 1"
    return None


def check_orders(corpus: Corpus, shop: Shop) -> None:
    """Every expected proposal names an order of the shop, owned by the sender, and its
    lines; else :class:`ConfigError` (before anything runs)."""
    for email in corpus.emails:
        expect = email["expect"]
        if expect["outcome"] != "propose":
            continue
        order = shop.order(expect["order"])
        if order is None:
            raise ConfigError(f"{email['id']}: the shop has no order {expect['order']}.")
        for line in expect["lines"]:
            if order.item(line["sku"]) is None:
                raise ConfigError(f"{email['id']}: order {order.order_id} has no line "
                                  f"{line['sku']}.")
