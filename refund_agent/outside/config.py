"""Which payment provider and email service the agent uses, read from the environment.

The stand-ins (JSONL logs in the output folder) are the default; Stripe and SMTP are switched on
here, each by one variable and the few it then needs (docs/OUTSIDE-SYSTEMS.md says how). The
secrets are kept out of the settings' repr, so printing the settings never shows them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ..errors import ConfigError

STAND_IN = "stand-in"
STRIPE = "stripe"
SMTP = "smtp"
SECURITIES = ("starttls", "tls", "none")
# The port each kind of SMTP connection uses unless SMTP_PORT says otherwise (RFC 8314: 465 is
# TLS from the first byte; 587 is submission with STARTTLS; 25 is relay, often without).
DEFAULT_PORTS = {"starttls": 587, "tls": 465, "none": 25}


@dataclass(frozen=True)
class OutsideSettings:
    """The outside systems' configuration.

    Attributes:
        payments: ``stand-in`` (refunds.log) or ``stripe`` (REFUND_AGENT_PAYMENTS).
        stripe_api_key: a secret or restricted key with write access to refunds (STRIPE_API_KEY).
        stripe_api_base: where the Stripe API is (STRIPE_API_BASE); empty: Stripe's own. Tests
            point it at localstripe on loopback.
        stripe_webhook_secret: the endpoint's signing secret, ``whsec_...``
            (STRIPE_WEBHOOK_SECRET), which ``refund-agent webhooks`` checks every event with.
        stripe_timeout: seconds to wait for one Stripe request (STRIPE_TIMEOUT_SECONDS).
        email: ``stand-in`` (outbox.log) or ``smtp`` (REFUND_AGENT_EMAIL).
        smtp_host, smtp_port, smtp_user, smtp_password: the mail server and the login (no login
            when the user is empty); the port defaults by security (587, 465, 25).
        smtp_security: ``starttls`` (default), ``tls`` (TLS from the start) or ``none``.
        smtp_from: the From address (REFUND_AGENT_SMTP_FROM); empty: the shop's support email.
        smtp_ca_file: a CA bundle to trust for the server's certificate (SMTP_CA_FILE), for a
            server whose certificate a private CA signed; empty: the system's CAs.
        receive_addresses: more addresses ``receive --smtp`` takes mail for besides the shop's
            support email and smtp_from (REFUND_AGENT_RECEIVE_ADDRESSES, comma-separated;
            ``@domain`` takes a whole domain); any other recipient is refused with 550.
        receive_user, receive_password: the login ``receive --smtp`` requires of whoever
            delivers to it (REFUND_AGENT_RECEIVE_USER and REFUND_AGENT_RECEIVE_PASSWORD); no
            login when the user is empty.
        max_connections: the most connections each listener (``receive --smtp``,
            ``webhooks``) holds at once (REFUND_AGENT_MAX_CONNECTIONS); 0: derived from the
            process's open-file limit (outside/listening.py). The others are refused at once.
    """

    payments: str = STAND_IN
    stripe_api_key: str = field(default="", repr=False)
    stripe_api_base: str = ""
    stripe_webhook_secret: str = field(default="", repr=False)
    stripe_timeout: float = 30.0
    email: str = STAND_IN
    smtp_host: str = ""
    smtp_port: int = 0
    smtp_user: str = ""
    smtp_password: str = field(default="", repr=False)
    smtp_security: str = "starttls"
    smtp_from: str = ""
    smtp_timeout: float = 30.0
    smtp_ca_file: str = ""
    receive_addresses: tuple[str, ...] = ()
    receive_user: str = ""
    receive_password: str = field(default="", repr=False)
    max_connections: int = 0

    def __post_init__(self) -> None:
        if self.payments not in (STAND_IN, STRIPE):
            raise ConfigError(f"REFUND_AGENT_PAYMENTS must be stand-in or stripe, got "
                              f"{self.payments!r}.")
        if self.email not in (STAND_IN, SMTP):
            raise ConfigError(f"REFUND_AGENT_EMAIL must be stand-in or smtp, got "
                              f"{self.email!r}.")
        if self.smtp_security not in SECURITIES:
            raise ConfigError(f"SMTP_SECURITY must be starttls, tls or none, got "
                              f"{self.smtp_security!r}.")
        if self.payments == STRIPE and not self.stripe_api_key:
            raise ConfigError("REFUND_AGENT_PAYMENTS=stripe needs STRIPE_API_KEY (a secret or "
                              "restricted key, sk_... or rk_..., with write access to refunds).")
        if self.email == SMTP and not self.smtp_host:
            raise ConfigError("REFUND_AGENT_EMAIL=smtp needs SMTP_HOST (and usually SMTP_USER "
                              "and SMTP_PASSWORD).")
        if bad := [a for a in self.receive_addresses if "@" not in a or " " in a]:
            raise ConfigError("REFUND_AGENT_RECEIVE_ADDRESSES must be addresses or @domains "
                              f"separated by commas, got {bad[0]!r}.")
        if self.receive_user and not self.receive_password:
            raise ConfigError("REFUND_AGENT_RECEIVE_USER needs REFUND_AGENT_RECEIVE_PASSWORD "
                              "(the password senders must log in with).")

    @property
    def port(self) -> int:
        """The SMTP port: SMTP_PORT, or the usual one for the security chosen."""
        return self.smtp_port or DEFAULT_PORTS[self.smtp_security]


def outside_settings(env: Mapping[str, str]) -> OutsideSettings:
    """The outside systems' settings from ``env``.

    Raises:
        ConfigError: a value that is not one of those allowed, in one line naming it.
    """
    def get(name: str, default: str = "") -> str:
        return env.get(name, default).strip()

    def seconds(name: str, default: float) -> float:
        raw = get(name)
        try:
            value = float(raw) if raw else default
        except ValueError:
            value = -1
        if not 0 < value <= 600:
            raise ConfigError(f"{name} must be a number of seconds between 0 and 600, got "
                              f"{raw!r}.")
        return value

    raw_port = get("SMTP_PORT")
    if raw_port and not (raw_port.isdigit() and 0 < int(raw_port) < 65_536):
        raise ConfigError(f"SMTP_PORT must be a port number from 1 to 65535, got {raw_port!r}.")

    raw_cap = get("REFUND_AGENT_MAX_CONNECTIONS")
    if raw_cap and not (raw_cap.isdigit() and int(raw_cap) > 0):
        raise ConfigError("REFUND_AGENT_MAX_CONNECTIONS must be a whole number above 0 (the "
                          f"connections each listener holds at once), got {raw_cap!r}.")

    return OutsideSettings(
        payments=get("REFUND_AGENT_PAYMENTS", STAND_IN).lower() or STAND_IN,
        stripe_api_key=get("STRIPE_API_KEY"),
        stripe_api_base=get("STRIPE_API_BASE").rstrip("/"),
        stripe_webhook_secret=get("STRIPE_WEBHOOK_SECRET"),
        stripe_timeout=seconds("STRIPE_TIMEOUT_SECONDS", 30.0),
        email=get("REFUND_AGENT_EMAIL", STAND_IN).lower() or STAND_IN,
        smtp_host=get("SMTP_HOST"),
        smtp_port=int(raw_port or 0),
        smtp_user=get("SMTP_USER"),
        smtp_password=env.get("SMTP_PASSWORD", ""),   # a password may end in a space
        smtp_security=get("SMTP_SECURITY", "starttls").lower() or "starttls",
        smtp_from=get("REFUND_AGENT_SMTP_FROM"),
        smtp_timeout=seconds("SMTP_TIMEOUT_SECONDS", 30.0),
        smtp_ca_file=get("SMTP_CA_FILE"),
        receive_addresses=tuple(a.strip() for a in get("REFUND_AGENT_RECEIVE_ADDRESSES")
                                .split(",") if a.strip()),
        receive_user=get("REFUND_AGENT_RECEIVE_USER"),
        receive_password=env.get("REFUND_AGENT_RECEIVE_PASSWORD", ""),
        max_connections=int(raw_cap or 0),
    )
