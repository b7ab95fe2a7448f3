"""The sample shop: its name, policy terms, orders and refund policy, loaded from ``data/``.

Order dates are stored as "days ago" so the samples behave the same on any day; loading turns
them into real dates relative to ``today``. Money is read as dollars and kept as integer cents:
every sum the policy makes is exact, and a price that is not a finite number of whole cents is
refused at load with the file, the order and the field.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import threading
import time
import unicodedata
from dataclasses import dataclass
from datetime import date, timedelta
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    Strict,
    ValidationError,
    model_validator,
)

from ..errors import ConfigError
from .timeouts import TimeoutPolicy

Reason = Literal["damaged", "changed_mind"]
#: The largest price or total the shop accepts, in dollars: far above any real order, far below
#: where floating point stops counting cents exactly.
MAX_DOLLARS = 1_000_000


def canonical_order_id(raw: str) -> str:
    """The one spelling of an order number: "#a 1043 " -> "A1043".

    Customers and models copy order numbers with a leading ``#``, stray spaces, lower case or
    full-width characters. Every id is made canonical once, where it enters, so the ledger can
    never count one order under two names.
    """
    text = unicodedata.normalize("NFKC", raw).strip().lstrip("#")
    return re.sub(r"\s+", "", text).upper()


def _cents(value: float) -> float:
    """A dollar amount that is finite, not negative, at most MAX_DOLLARS, in whole cents."""
    if isinstance(value, bool) or not math.isfinite(value):
        raise ValueError("must be a finite number of dollars")
    if not 0 <= value <= MAX_DOLLARS:
        raise ValueError(f"must be between 0 and {MAX_DOLLARS:,}")
    if abs(value * 100 - round(value * 100)) > 1e-6:
        raise ValueError("must be in whole cents")
    return value


Dollars = Annotated[float, Strict(), AfterValidator(_cents)]


def to_cents(dollars: float) -> int:
    return round(dollars * 100)


def to_dollars(cents: int) -> float:
    return round(cents / 100, 2)


class _Data(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Customer(_Data):
    name: str
    email: str


class Item(_Data):
    """One order line. Its ``sku`` names the line: an order lists each sku once."""

    sku: str = Field(min_length=1)
    name: str
    category: str
    price: Dollars
    quantity: int = Field(default=1, ge=1, le=10_000)
    final_sale: bool = False

    @property
    def line(self) -> str:
        return self.sku

    @property
    def cents(self) -> int:
        """The line total in cents; money is added up in integers to avoid float drift."""
        return to_cents(self.price) * self.quantity


class RefundedLine(_Data):
    line: str
    reason: Reason | Literal["shipping"]
    amount: Dollars | None = None  # what was paid for it; None means the whole line
    units: int | None = Field(default=None, ge=1)  # how many units; None means all of them


class PastRefund(_Data):
    """A refund made before this desk existed (from the shop's export)."""

    on: date
    reason: str
    lines: list[RefundedLine] = Field(min_length=1)


class Order(_Data):
    order_id: str
    customer: Customer
    ordered_on: date
    delivered_on: date | None
    payment_method: str
    # The payment provider's record of this order's payment (a Stripe charge ``ch_...`` or
    # PaymentIntent ``pi_...``), for REFUND_AGENT_PAYMENTS=stripe. Internal: left out of
    # model_dump, so the model never sees it in lookup_order.
    payment_ref: str | None = Field(default=None, exclude=True)
    items: list[Item] = Field(min_length=1)
    shipping: Dollars
    total: Dollars
    refunds: list[PastRefund]

    @model_validator(mode="after")
    def _consistent(self) -> Order:
        skus = [i.sku for i in self.items]
        if len(set(skus)) != len(skus):
            raise ValueError("lists a sku twice; give each line its own sku")
        if "SHIPPING" in skus:
            raise ValueError("uses the reserved line name SHIPPING as a sku")
        lines = sum(i.cents for i in self.items) + to_cents(self.shipping)
        if lines != to_cents(self.total):
            raise ValueError(f"total {self.total:.2f} is not items plus shipping "
                             f"({lines / 100:.2f})")
        refunded = [r.line for p in self.refunds for r in p.lines]
        unknown = set(refunded) - set(skus) - {"SHIPPING"}
        if unknown:
            raise ValueError(f"an earlier refund names lines it does not have: {sorted(unknown)}")
        for sku in set(refunded):
            item = self.item(sku)
            quantity = item.quantity if item is not None else 1
            units = [(r.units or quantity) if item is not None else 1
                     for p in self.refunds for r in p.lines if r.line == sku]
            if sum(units) > quantity:
                raise ValueError(f"earlier refunds refund {sku} more than its quantity "
                                 f"({quantity}) or twice")
        return self

    def item(self, line: str) -> Item | None:
        return next((i for i in self.items if i.sku == line), None)

    @property
    def total_cents(self) -> int:
        return to_cents(self.total)

    @property
    def shipping_cents(self) -> int:
        return to_cents(self.shipping)


class PolicyTerms(_Data):
    """The numbers the refund policy turns on, from ``shop.json``'s ``policy`` section."""

    window_days: int = Field(ge=0, le=3650)
    return_fee: Dollars
    return_fee_per: Literal["refund", "item"]
    warranty_categories: list[str] = Field(default_factory=list)

    @property
    def return_fee_cents(self) -> int:
        return to_cents(self.return_fee)

    def placeholders(self) -> dict[str, str]:
        """What ``refund-policy.md`` may quote, as the customer should read it."""
        warranty = [c.capitalize() + ("s" if not c.endswith("s") else "")
                    for c in self.warranty_categories]
        return {
            "window_days": str(self.window_days),
            "return_fee": f"${self.return_fee:,.2f}",
            "fee_basis": ("charged once per refund" if self.return_fee_per == "refund"
                          else "charged for each item returned"),
            "warranty_categories": " and ".join(warranty) or "No items",
        }


class DeskRules(_Data):
    """How the desk works for this shop (shop.json "desk"), read fresh at every decision."""

    # Refunds above this many dollars are paid only once two different people approved them
    # (None: one approval is enough).
    two_person_above: float | None = Field(default=None, ge=0, le=MAX_DOLLARS)
    # A refund waiting longer than this gets a reminder badge; it should stay below the
    # expiry (REFUND_AGENT_APPROVAL_DAYS) so a person sees it before it closes.
    remind_after_hours: float = Field(default=24.0, gt=0, le=24 * 3650)

    @property
    def two_person_above_cents(self) -> int | None:
        return None if self.two_person_above is None else round(self.two_person_above * 100)


class Timeouts(_Data):
    """What happens to a refund nobody decides (shop.json "timeouts", desk/timeouts.py): the
    owner is reminded after one wait, a lead brought in after a longer one (None: never). The
    expiry stays the approval window (REFUND_AGENT_APPROVAL_DAYS)."""

    remind_owner_after_hours: float | None = Field(default=None, gt=0, le=24 * 3650)
    escalate_after_hours: float | None = Field(default=None, gt=0, le=24 * 3650)

    def policy(self) -> TimeoutPolicy:
        hours = (self.remind_owner_after_hours, self.escalate_after_hours)
        return TimeoutPolicy(*(None if h is None else h * 3600 for h in hours))


class ShopInfo(_Data):
    name: str
    support_email: str
    signature: str
    policy: PolicyTerms
    desk: DeskRules = DeskRules()
    timeouts: Timeouts = Timeouts()


class Sample(BaseModel):
    """A sample customer email, shown as a one-click ticket in the front ends."""

    key: str
    label: str
    from_name: str
    sender: str
    subject: str
    body: str


#: A file modified less than this long before it was read is read again at its next use: a
#: rewrite within the file system's timestamp granularity could keep size and time the same.
RACY_NS = 2_000_000_000


@dataclass(frozen=True)
class _Loaded:
    """A data file's parsed contents and the ``stat`` signature they were read under."""

    signature: tuple | None
    read_at_ns: int
    digest: bytes | None   # of the bytes read, so an unchanged file is not parsed again
    value: Any

    def trusted(self, signature: tuple) -> bool:
        return signature == self.signature and self.read_at_ns - signature[3] > RACY_NS


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"Missing data file: {path}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{path} is not valid UTF-8 JSON: {exc}") from None
    except OSError as exc:  # a folder in its place, no permission, an I/O error
        raise ConfigError(f"Cannot read the data file {path}: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a JSON object, not {type(data).__name__}.")
    return data


def _without_comments(raw: Any) -> Any:
    if isinstance(raw, dict):
        return {k: _without_comments(v) for k, v in raw.items() if k != "_comment"}
    return raw


def _problems(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or 'value'}: {e['msg']}"
                     for e in exc.errors())


def _order_from_raw(raw: Any, today: date) -> Order:
    if not isinstance(raw, dict):
        raise ValueError("is not a JSON object")

    def ago(days: Any) -> date | None:
        if days is None:
            return None
        if isinstance(days, bool) or not isinstance(days, int) or not 0 <= days <= 36500:
            raise ValueError(f"days ago must be a whole number of days, got {days!r}")
        return today - timedelta(days=days)

    fields = dict(raw)
    fields["ordered_on"] = ago(fields.pop("ordered_days_ago", None))
    fields["delivered_on"] = ago(fields.pop("delivered_days_ago", None))
    refunds = fields.get("refunds", [])
    if not isinstance(refunds, list) or not all(isinstance(r, dict) for r in refunds):
        raise ValueError("refunds must be a list of objects")
    fields["refunds"] = [{**{k: v for k, v in r.items() if k != "days_ago"},
                          "on": ago(r.get("days_ago"))} for r in refunds]
    return Order.model_validate(fields)


class Shop:
    """Read-only access to one shop's data folder.

    Args:
        data_dir: folder with ``shop.json``, ``orders.json``, ``refund-policy.md`` and
            ``sample-emails.json``.
        today: the date "days ago" is counted from (injectable for tests).
    """

    def __init__(self, data_dir: Path, today: date | None = None) -> None:
        self.data_dir = Path(data_dir)
        self.today = today or date.today()
        if not self.data_dir.is_dir():
            raise ConfigError(f"Data folder not found: {self.data_dir}")
        self._fresh: dict[str, _Loaded] = {}
        self._fresh_lock = threading.Lock()

    def _current(self, name: str, load: Any) -> Any:
        """``load()``'s answer for ``data/<name>``, read again whenever the file changed.

        A long-lived process (the page's server) must see what the shop's export says now: a
        line refunded elsewhere (by phone) since start-up must be refused there as it is in a
        new terminal process. One ``stat`` per use keeps it cheap: the file is read again only
        when its identity, size or modification time moved, or when it was modified so
        recently that a same-size rewrite in the same clock tick could hide (as git treats a
        "racily clean" index entry); it is parsed again only if its bytes differ.
        """
        path = self.data_dir / name
        try:
            st = os.stat(path)
            signature: tuple | None = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        except OSError:
            signature = None   # load() says what is wrong with the file
        with self._fresh_lock:
            cached = self._fresh.get(name)
            if cached is not None and signature is not None and cached.trusted(signature):
                return cached.value
            read_at = time.time_ns()
            try:
                digest = hashlib.blake2b(path.read_bytes(), digest_size=16).digest()
            except OSError:
                digest = None
            if cached is not None and digest is not None and digest == cached.digest:
                value = cached.value   # touched, or read too soon after a write: unchanged
            else:
                value = load()
            self._fresh[name] = _Loaded(signature, read_at, digest, value)
            return value

    @property
    def info(self) -> ShopInfo:
        def load() -> ShopInfo:
            raw = _without_comments(_read_json(self.data_dir / "shop.json"))
            return self._validated(ShopInfo, raw, "shop.json")
        return self._current("shop.json", load)

    @property
    def terms(self) -> PolicyTerms:
        return self.info.policy

    @property
    def orders(self) -> dict[str, Order]:
        """The orders by id, as ``orders.json`` holds them now (see :meth:`_current`)."""
        return self._current("orders.json", self._load_orders)

    def _load_orders(self) -> dict[str, Order]:
        raw = _read_json(self.data_dir / "orders.json").get("orders", [])
        if not isinstance(raw, list):
            raise ConfigError("orders.json: 'orders' must be a list.")
        orders: dict[str, Order] = {}
        for n, entry in enumerate(raw, 1):
            name = entry.get("order_id") if isinstance(entry, dict) else None
            where = f"orders.json, order {name or f'#{n}'}"
            try:
                order = _order_from_raw(entry, self.today)
            except ValidationError as exc:
                raise ConfigError(f"{where}: {_problems(exc)}") from None
            except (KeyError, TypeError, ValueError) as exc:
                raise ConfigError(f"{where}: {exc}") from None
            key = canonical_order_id(order.order_id)
            if not key or key != order.order_id:
                raise ConfigError(f"{where}: write the order id as {key!r} (upper case, no "
                                  "spaces or #), the one spelling the ledger counts it under.")
            if key in orders:
                raise ConfigError(f"{where}: the order id is used twice.")
            orders[key] = order
        return orders

    @property
    def policy_text(self) -> str:
        """``refund-policy.md`` with the policy's numbers filled in from ``shop.json``."""
        path = self.data_dir / "refund-policy.md"

        def load() -> str:
            try:
                return path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise ConfigError(f"Cannot read the refund policy {path}: {exc}") from None
        template = self._current("refund-policy.md", load)
        values = {"shop_name": self.info.name, **self.terms.placeholders()}
        try:
            return template.format_map(values)
        except (KeyError, ValueError, IndexError) as exc:
            raise ConfigError(f"{path} quotes an unknown placeholder {exc}; known: "
                              f"{', '.join(sorted(values))}.") from None

    @cached_property
    def samples(self) -> dict[str, Sample]:
        raw = _read_json(self.data_dir / "sample-emails.json").get("samples", [])
        try:
            samples = [self._validated(Sample, {**s, "sender": s.get("from")},
                                       "sample-emails.json") for s in raw]
        except (TypeError, AttributeError) as exc:  # not a list of objects
            raise ConfigError(f"sample-emails.json is invalid: {exc}") from None
        return {s.key: s for s in samples}

    def order(self, order_id: str) -> Order | None:
        """The order with this id, in any of its spellings, or None."""
        return self.orders.get(canonical_order_id(order_id))

    def sample(self, key: str) -> Sample:
        try:
            return self.samples[key]
        except KeyError:
            known = ", ".join(self.samples) or "none"
            raise ConfigError(f"No sample email called {key!r} (known: {known}).") from None

    @staticmethod
    def _validated(model: type[BaseModel], raw: dict, name: str):
        try:
            return model.model_validate(raw)
        except ValidationError as exc:
            raise ConfigError(f"{name} is invalid: {_problems(exc)}") from None
