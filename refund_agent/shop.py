"""The sample shop: its name, orders and refund policy, loaded from ``data/``.

Order dates are stored as "days ago" so the samples behave the same on any day; loading turns
them into real dates relative to ``today``.
"""

from __future__ import annotations

import json
from datetime import date, timedelta
from functools import cached_property
from pathlib import Path

from pydantic import BaseModel, ValidationError

from .errors import ConfigError


class Customer(BaseModel):
    name: str
    email: str


class Item(BaseModel):
    sku: str
    name: str
    category: str
    price: float
    quantity: int = 1
    final_sale: bool = False

    @property
    def cents(self) -> int:
        """The line total in cents; money is added up in integers to avoid float drift."""
        return round(self.price * 100) * self.quantity


class PastRefund(BaseModel):
    amount: float
    on: date
    reason: str


class Order(BaseModel):
    order_id: str
    customer: Customer
    ordered_on: date
    delivered_on: date | None
    payment_method: str
    items: list[Item]
    shipping: float
    total: float
    refunds: list[PastRefund]


class ShopInfo(BaseModel):
    name: str
    support_email: str
    signature: str


class Sample(BaseModel):
    """A sample customer email, shown as a one-click ticket in the front ends."""

    key: str
    label: str
    from_name: str
    sender: str
    subject: str
    body: str


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


def _order_from_raw(raw: dict, today: date) -> Order:
    def ago(days: int | None) -> date | None:
        return None if days is None else today - timedelta(days=days)

    fields = dict(raw)
    fields["ordered_on"] = ago(fields.pop("ordered_days_ago"))
    fields["delivered_on"] = ago(fields.pop("delivered_days_ago", None))
    fields["refunds"] = [
        {"amount": r["amount"], "on": ago(r["days_ago"]), "reason": r["reason"]}
        for r in fields.get("refunds", [])
    ]
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

    @cached_property
    def info(self) -> ShopInfo:
        return self._validated(ShopInfo, _read_json(self.data_dir / "shop.json"), "shop.json")

    @cached_property
    def orders(self) -> dict[str, Order]:
        raw = _read_json(self.data_dir / "orders.json").get("orders", [])
        try:
            orders = [_order_from_raw(o, self.today) for o in raw]
        except (KeyError, TypeError, ValueError, ValidationError) as exc:
            raise ConfigError(f"orders.json has an invalid order: {exc}") from None
        return {o.order_id.upper(): o for o in orders}

    @cached_property
    def policy_text(self) -> str:
        path = self.data_dir / "refund-policy.md"
        try:
            return path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"Cannot read the refund policy {path}: {exc}") from None

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
        """The order with this id (case-insensitive), or None."""
        return self.orders.get(order_id.strip().upper().lstrip("#"))

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
            raise ConfigError(f"{name} is invalid: {exc}") from None
