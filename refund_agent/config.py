"""Settings, read once from the environment and an optional ``.env`` file.

Every path is overridable so tests and the notebook can work in a temporary folder, and a user
can point the agent at another shop's data. The defaults work the same from a checkout and from
``pip install``: the shop is the sample shop shipped in the package (the checkout's ``data/``),
and what runs write goes to ``output/`` in the folder you run in.
"""

from __future__ import annotations

import importlib.util
import math
import os
import unicodedata
from dataclasses import dataclass, field, replace
from pathlib import Path

from dotenv import load_dotenv

from .errors import ConfigError
from .outside.config import OutsideSettings, outside_settings
from .providers.table import ALL_EFFORTS, OPENAI, PROFILES, XAI

# The folder above the package: a checkout's root when running from source (the tests, bench
# and notebooks use it to find the repository); in an installed package it is site-packages,
# so nothing a user runs may depend on it.
PROJECT_ROOT = Path(__file__).resolve().parent.parent
XAI_BASE_URL = "https://api.x.ai/v1"


def _checkout() -> Path | None:
    """The checkout this package runs from, or None when it is installed (a wheel)."""
    return PROJECT_ROOT if (PROJECT_ROOT / "pyproject.toml").is_file() else None


def shipped_folder(package: str, checkout_folder: str, marker: str, hint: str = "") -> Path:
    """A folder of the checkout that also ships inside the package (pyproject.toml's
    package-dir maps ``package`` onto ``checkout_folder``); ``marker`` is a file it holds.

    Running from a checkout (PYTHONPATH, or ``pip install -e .``, as ./dev does) the folder is
    the checkout's own. Installed from a wheel, the import system finds it inside the package.
    The folders have no ``__init__.py`` (data/ is a deliverable, not code), so they are
    namespace packages: importlib.resources would hand back a MultiplexedPath, not the Path
    the shop is read from, hence ``find_spec``. (setuptools' editable finder does not resolve
    a namespace folder under a regular package, so an editable install relies on the checkout
    lookup; it always runs from one.)
    """
    root = _checkout()
    if root is not None and (root / checkout_folder / marker).is_file():
        return root / checkout_folder
    try:
        spec = importlib.util.find_spec(package)
    except ImportError:
        spec = None
    for folder in (spec.submodule_search_locations or []) if spec else []:
        if (Path(folder) / marker).is_file():
            return Path(folder)
    raise ConfigError(f"The package's copy of {checkout_folder}/ is missing (no {marker} in "
                      f"{package}); reinstall refund-agent{hint}.")


def sample_shop() -> Path:
    """The sample shop (Juniper & Pine Home Goods): REFUND_AGENT_DATA's default."""
    return shipped_folder("refund_agent.sample_shop", "data", "shop.json",
                          hint=", or set REFUND_AGENT_DATA to a shop's folder")


def default_output() -> Path:
    """REFUND_AGENT_OUTPUT's default: ``output/`` in the folder you run in (the checkout's
    root under ``./dev``), never inside the installed package."""
    return Path.cwd() / "output"


def _float(name: str, default: float) -> float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        return float(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a number, got {raw!r}.") from None


@dataclass(frozen=True)
class _Range:
    """What a numeric setting allows: from ``low`` to ``high`` inclusive, in ``unit``."""

    low: float
    high: float
    unit: str
    whole: bool = False     # a count: no fractions
    shown_low: str = ""     # how to say ``low`` when its number reads badly (1/86400 days)

    def describe(self) -> str:
        low = self.shown_low or f"{self.low:g}"
        kind = "a whole number" if self.whole else "a number"
        return f"{kind} of {self.unit} from {low} to {self.high:g}"


# How long a proposed refund waits for a decision before it expires, unless
# REFUND_AGENT_APPROVAL_DAYS says otherwise: one constant for the Settings field, load_settings
# and what the docs and the walkthrough say (tests/docs/test_notebook_checks.py compares them).
APPROVAL_DAYS = 7.0

# How many automatic answers the desk sends on one thread, and to one address, within
# MAIL_CAP_SECONDS before the next reply goes to a person instead (outside/mailin/loops.py).
# A conversation with a person rarely needs five answers within an hour; an auto-responder
# that does not say it is one (no Auto-Submitted) reaches five in seconds, and without a cap
# it and the desk would mail each other forever. MAIL_CAP_MOST bounds the setting, and so how
# many answers the store reads back to count.
MAIL_CAP = 5
MAIL_CAP_SECONDS = 3600.0
MAIL_CAP_MOST = 100

# How many runs one process advances at once (``refund-agent work --concurrency`` and the page's
# worker): each is a thread that mostly waits on the model, so the bound is what the provider
# allows rather than the cores. CONCURRENCY_MOST keeps a typo (16000) from opening that many
# connections to the store and the provider.
CONCURRENCY = 8
CONCURRENCY_MOST = 256


# Every numeric setting and what it allows. The bounds keep the desk working rather than
# encode a policy: a lease under a second would make the heartbeat renew it in a busy loop
# (0 spins), a wait for approval of 0, a negative or NaN number of days expires every refund
# at once or never, and "inf" or 1e308 seconds overflow the clocks they are added to.
RANGES = {
    "REFUND_AGENT_TIMEOUT": _Range(1, 86_400, "seconds"),
    "REFUND_AGENT_MAX_RETRIES": _Range(0, 20, "retries", whole=True),
    "REFUND_AGENT_OFFLINE_LATENCY": _Range(0, 60, "seconds"),
    "REFUND_AGENT_LEASE_SECONDS": _Range(1, 86_400, "seconds"),
    "REFUND_AGENT_APPROVAL_DAYS": _Range(1 / 86_400, 365, "days",
                                         shown_low="0.0000116 (one second)"),
    "REFUND_AGENT_MAIL_CAP": _Range(1, MAIL_CAP_MOST, "answers", whole=True),
    "REFUND_AGENT_MAIL_CAP_SECONDS": _Range(60, 7 * 86_400, "seconds"),
    "REFUND_AGENT_CONCURRENCY": _Range(1, CONCURRENCY_MOST, "runs", whole=True),
    # A budget of our own under the provider's limit (0: none, the provider's 429s and headers
    # alone set the pace); patience: how long one request waits out rate limits before its run
    # fails resumably (past REFUND_AGENT_MAX_RETRIES refusals).
    "REFUND_AGENT_RATE_RPM": _Range(0, 10_000_000, "requests a minute", whole=True),
    "REFUND_AGENT_RATE_TPM": _Range(0, 10_000_000_000, "tokens a minute", whole=True),
    "REFUND_AGENT_RATE_PATIENCE": _Range(0, 86_400, "seconds"),
}


def _setting(name: str, default: float) -> float:
    """A numeric setting from the environment, checked against RANGES[name]."""
    value, allowed = float(_float(name, default)), RANGES[name]
    ok = (math.isfinite(value) and allowed.low <= value <= allowed.high
          and (not allowed.whole or value.is_integer()))
    if not ok:
        raw = os.environ.get(name, "").strip()
        raise ConfigError(f"{name} must be {allowed.describe()}, got {raw!r}.")
    return value


def key_problem(key: str, name: str) -> str | None:
    """Why ``key`` cannot be an API key, naming the first wrong character and where it is;
    None when every character is a visible ASCII one (what the providers' keys are made of).

    A key goes in an HTTP header, which only carries ASCII: a key pasted with curly quotes or
    an invisible space ended every request in a UnicodeEncodeError. The key itself is never
    put in the message (secrets are never logged), only the one character that is wrong.
    """
    for position, char in enumerate(key, start=1):
        if not "!" <= char <= "~":
            code = f"U+{ord(char):04X}"
            what = unicodedata.name(char, "")
            hint = " (pasted with quotes?)" if "QUOTATION MARK" in what else ""
            return (f"{name} has a character no API key has, at position {position}: "
                    f"{code} {what}".rstrip() + f"{hint}. Paste the key again as plain text, "
                    "without quotes or spaces.")
    return None


@dataclass(frozen=True)
class Settings:
    """Everything configurable, in one immutable object.

    Attributes:
        provider: ``xai`` (the default) or ``openai`` (REFUND_AGENT_PROVIDER, or only
            OPENAI_API_KEY set); see providers/table.py for what differs.
        api_key: the provider's key; when empty the offline stand-in model is used (speaking
            the provider's dialect).
        model: model name sent with each request.
        base_url: the Responses API endpoint for the real model.
        reasoning_effort: the wanted ``reasoning.effort`` ("low", "xhigh", ...), or None to omit
            it; sent only to models that take it (providers.MODELS).
        timeout: seconds to wait for one model request (reasoning models can be slow).
        max_retries: retries for a request that fails before the answer starts.
        data_dir: the shop's orders, policy and sample emails (default: the sample shop
            shipped in the package).
        output_dir: everything a run writes (store, refunds log, outbox); default
            ``output/`` in the current folder.
        offline_latency: seconds the offline model spends on a request, to make streaming visible.
        crash_at: named crash points at which the process kills itself (for tests and demos).
        lease_seconds: how long a run's owner may go without renewing its lease before another
            process may take the run over (renewed every third of it while working).
        approval_days: how long a proposed refund may wait for a decision before it expires
            (REFUND_AGENT_APPROVAL_DAYS; the page's worker and ``refund-agent expire`` apply it).
        allowed_hosts: host names the page answers to besides localhost, 127.0.0.1 and ::1
            (REFUND_AGENT_ALLOWED_HOSTS, comma-separated).
        zero_retention: ask the provider to keep nothing (``store=false`` on every request) and
            send the run's own transcript each turn instead of ``previous_response_id``
            (REFUND_AGENT_ZERO_RETENTION=1). More bytes per request; nothing kept remotely.
        database_url: a ``postgresql://`` URL (REFUND_AGENT_DATABASE_URL) to keep the store,
            and the payment and email stand-ins' records, in one PostgreSQL database that
            several hosts share; empty: the SQLite file in ``output_dir``.
        offline_url: the base URL of one offline model server that every host reaches
            (REFUND_AGENT_OFFLINE_URL, e.g. ``http://10.0.0.5:8787/v1`` from
            ``python -m offline_model``); empty: each process starts its own.
        mail_cap: how many automatic answers the desk sends on one mail thread, and to one
            customer's address, within ``mail_cap_seconds`` (REFUND_AGENT_MAIL_CAP, default 5);
            a reply past it is not answered but handed to a person (an escalation), so an
            auto-responder that does not say it is one cannot keep the desk answering.
        mail_cap_seconds: the window the cap counts answers in, seconds
            (REFUND_AGENT_MAIL_CAP_SECONDS, default 3600).
        concurrency: how many runs one process advances at once (REFUND_AGENT_CONCURRENCY,
            default 8): ``refund-agent work``'s default for ``--concurrency`` and the page's
            worker's bound; more runs wait for a free slot.
        rate_rpm: requests a minute this process never exceeds towards the provider
            (REFUND_AGENT_RATE_RPM; 0, the default: no budget of its own, the provider's 429s
            and rate-limit headers set the pace; providers/limiter.py).
        rate_tpm: tokens a minute likewise (REFUND_AGENT_RATE_TPM, 0: none).
        rate_patience: seconds one request waits out rate limits, past ``max_retries``
            refusals, before its run fails resumably (REFUND_AGENT_RATE_PATIENCE, default 900).
        offline_rate_limit: the in-process stand-in answers 429 past this pace, ``60/min`` or
            ``10/s`` (REFUND_AGENT_OFFLINE_RATE_LIMIT; empty: no limit).
        outside: which payment provider and email service to use, and how to reach them
            (REFUND_AGENT_PAYMENTS, STRIPE_*, REFUND_AGENT_EMAIL, SMTP_*; see
            refund_agent/outside/config.py and docs/OUTSIDE-SYSTEMS.md).
    """

    api_key: str = ""
    provider: str = XAI
    model: str = "grok-4.7"
    base_url: str = XAI_BASE_URL
    reasoning_effort: str | None = "low"
    timeout: float = 900.0
    max_retries: int = 5
    data_dir: Path = field(default_factory=sample_shop)
    output_dir: Path = field(default_factory=default_output)
    offline_latency: float = 0.0
    crash_at: frozenset[str] = field(default_factory=frozenset)
    lease_seconds: float = 15 * 60
    allowed_hosts: frozenset[str] = field(default_factory=frozenset)
    approval_days: float = APPROVAL_DAYS
    zero_retention: bool = False
    database_url: str = ""
    offline_url: str = ""
    mail_cap: int = MAIL_CAP
    mail_cap_seconds: float = MAIL_CAP_SECONDS
    concurrency: int = CONCURRENCY
    rate_rpm: int = 0
    rate_tpm: int = 0
    rate_patience: float = 900.0
    offline_rate_limit: str = ""
    outside: OutsideSettings = field(default_factory=OutsideSettings)

    def __post_init__(self) -> None:
        # Settings made in code (tests, the notebook) may go below the environment's bounds
        # (a lease of 0.2 s in a test), but never to a value that breaks the loops using it.
        for name in ("timeout", "lease_seconds", "approval_days"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ConfigError(f"Settings.{name} must be a finite number above 0, got "
                                  f"{value!r}.")
        if not (math.isfinite(self.offline_latency) and self.offline_latency >= 0):
            raise ConfigError(f"Settings.offline_latency must be a finite number of seconds, 0 "
                              f"or more, got {self.offline_latency!r}.")
        if not (isinstance(self.max_retries, int) and self.max_retries >= 0):
            raise ConfigError(f"Settings.max_retries must be a whole number, 0 or more, got "
                              f"{self.max_retries!r}.")
        if not (isinstance(self.mail_cap, int) and 1 <= self.mail_cap <= MAIL_CAP_MOST):
            raise ConfigError(f"Settings.mail_cap must be a whole number from 1 to "
                              f"{MAIL_CAP_MOST}, got {self.mail_cap!r}.")
        if not (isinstance(self.mail_cap_seconds, (int, float))
                and math.isfinite(self.mail_cap_seconds) and self.mail_cap_seconds > 0):
            raise ConfigError(f"Settings.mail_cap_seconds must be a finite number above 0, "
                              f"got {self.mail_cap_seconds!r}.")
        if not (isinstance(self.concurrency, int)
                and 1 <= self.concurrency <= CONCURRENCY_MOST):
            raise ConfigError(f"Settings.concurrency must be a whole number from 1 to "
                              f"{CONCURRENCY_MOST}, got {self.concurrency!r}.")
        profile = PROFILES.get(self.provider, PROFILES[XAI])
        if problem := key_problem(self.api_key, profile.key_env):
            raise ConfigError(problem)

    @property
    def offline(self) -> bool:
        """True when no key is set, so the offline stand-in answers instead of Grok."""
        return not self.api_key

    @property
    def model_label(self) -> str:
        """How front ends name the model: plainly, so nobody mistakes the stand-in for Grok."""
        key = PROFILES[self.provider].key_env
        if self.offline:
            return f"offline stand-in model (no {key} set)"
        if self.provider == OPENAI:
            return f"OpenAI ({self.model})"
        return f"Grok ({self.model})"

    @property
    def db_path(self) -> Path:
        return self.output_dir / "refund-agent.sqlite3"

    @property
    def store_target(self) -> Path | str:
        """What the store opens: the PostgreSQL URL when one is set, else the SQLite file."""
        return self.database_url or self.db_path

    def store_for(self, file: str | None) -> Path | str:
        """What an agent keeping its own SQLite ``file`` (None: the desk's) opens."""
        return self.store_target if self.database_url or not file else self.output_dir / file

    def with_(self, **changes: object) -> Settings:
        """A copy with some fields changed (handy in tests and the notebook)."""
        return replace(self, **changes)


def _flag(name: str) -> bool:
    raw = os.environ.get(name, "").strip().lower()
    if raw in ("", "0", "false", "no", "off"):
        return False
    if raw in ("1", "true", "yes", "on"):
        return True
    raise ConfigError(f"{name} must be 1 or 0 (or true/false, yes/no, on/off), got {raw!r}.")


def env_files() -> list[Path]:
    """The ``.env`` files read, first one winning: the current folder's, then (running from a
    checkout) the checkout's root, where the README says to put the key."""
    root = _checkout()
    here = Path.cwd() / ".env"
    return [here, *([root / ".env"] if root is not None and root / ".env" != here else [])]


def load_settings(env_file: Path | None = None) -> Settings:
    """Read settings from the environment, after loading ``.env`` without overriding it."""
    for path in [env_file] if env_file else env_files():
        load_dotenv(path, override=False)
    env = os.environ
    effort = env.get("REFUND_AGENT_REASONING_EFFORT", "low").strip().lower()
    if effort not in ALL_EFFORTS | {"none", ""}:
        raise ConfigError("REFUND_AGENT_REASONING_EFFORT must be one of "
                          f"{', '.join(sorted(ALL_EFFORTS))} or none, got {effort!r}.")
    profile = PROFILES[_provider(env)]
    crash = {p.strip() for p in env.get("REFUND_AGENT_CRASH_AT", "").split(",") if p.strip()}
    if env.get("CRASH_AFTER_REFUND", "").strip() not in {"", "0"}:
        crash.add("after_refund")
    return Settings(
        api_key=env.get(profile.key_env, "").strip(),
        provider=profile.name,
        model=env.get("REFUND_AGENT_MODEL", "").strip() or profile.default_model,
        base_url=env.get("REFUND_AGENT_BASE_URL", "").strip() or profile.base_url,
        reasoning_effort=None if effort in {"none", ""} else effort,
        timeout=_setting("REFUND_AGENT_TIMEOUT", 900.0),
        max_retries=int(_setting("REFUND_AGENT_MAX_RETRIES", 5)),
        data_dir=Path(env.get("REFUND_AGENT_DATA") or sample_shop()),
        output_dir=Path(env.get("REFUND_AGENT_OUTPUT") or default_output()),
        offline_latency=_setting("REFUND_AGENT_OFFLINE_LATENCY", 0.0),
        crash_at=frozenset(crash),
        lease_seconds=_setting("REFUND_AGENT_LEASE_SECONDS", 15 * 60),
        approval_days=_setting("REFUND_AGENT_APPROVAL_DAYS", APPROVAL_DAYS),
        allowed_hosts=frozenset(h.strip().lower().rstrip(".") for h in
                                env.get("REFUND_AGENT_ALLOWED_HOSTS", "").split(",")
                                if h.strip()),
        zero_retention=_flag("REFUND_AGENT_ZERO_RETENTION"),
        database_url=_database_url(env.get("REFUND_AGENT_DATABASE_URL", "")),
        offline_url=env.get("REFUND_AGENT_OFFLINE_URL", "").strip().rstrip("/"),
        mail_cap=int(_setting("REFUND_AGENT_MAIL_CAP", MAIL_CAP)),
        mail_cap_seconds=_setting("REFUND_AGENT_MAIL_CAP_SECONDS", MAIL_CAP_SECONDS),
        concurrency=int(_setting("REFUND_AGENT_CONCURRENCY", CONCURRENCY)),
        rate_rpm=int(_setting("REFUND_AGENT_RATE_RPM", 0)),
        rate_tpm=int(_setting("REFUND_AGENT_RATE_TPM", 0)),
        rate_patience=_setting("REFUND_AGENT_RATE_PATIENCE", 900.0),
        offline_rate_limit=env.get("REFUND_AGENT_OFFLINE_RATE_LIMIT", "").strip(),
        outside=outside_settings(env),
    )


def _provider(env: os._Environ[str]) -> str:
    """REFUND_AGENT_PROVIDER, or OpenAI when only an OpenAI key is set; else xAI."""
    raw = env.get("REFUND_AGENT_PROVIDER", "").strip().lower()
    if raw in ("grok", "x.ai"):
        raw = XAI
    if raw and raw not in PROFILES:
        raise ConfigError(f"REFUND_AGENT_PROVIDER must be xai or openai, got {raw!r}.")
    if raw:
        return raw
    if env.get("OPENAI_API_KEY", "").strip() and not env.get("XAI_API_KEY", "").strip():
        return OPENAI
    return XAI


def _database_url(raw: str) -> str:
    """REFUND_AGENT_DATABASE_URL, checked for its scheme (the server is reached later)."""
    url = raw.strip()
    if url and not url.startswith(("postgresql://", "postgres://")):
        shown = url.split("://", 1)[0] + "://..." if "://" in url else repr(url[:40])
        raise ConfigError(
            f"REFUND_AGENT_DATABASE_URL must be a postgresql:// URL (got {shown}), for example "
            "postgresql://refunds:secret@db.internal:5432/refunds. Leave it unset to keep the "
            "store in SQLite under the output folder.")
    return url
