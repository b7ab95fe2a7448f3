"""Every numeric setting is checked: positive where it must be, finite, within sane bounds,
with a one-line message naming the variable and what it allows, on the terminal and the page.

REFUND_AGENT_APPROVAL_DAYS=-1, 0, nan and inf were accepted (expiring every refund at once or
never), and REFUND_AGENT_LEASE_SECONDS=0 made the heartbeat renew the lease in a busy loop.
"""
from __future__ import annotations

import pytest
from helpers.cli import run_forked as run_cli  # new processes, forked warm (no imports)

from refund_agent import Settings
from refund_agent.config import RANGES, load_settings
from refund_agent.errors import ConfigError

BAD = {
    "REFUND_AGENT_APPROVAL_DAYS": ["-1", "0", "nan", "inf", "-inf", "1e308", "366", "0.00001"],
    "REFUND_AGENT_LEASE_SECONDS": ["0", "-5", "0.5", "nan", "inf", "1e9"],
    "REFUND_AGENT_TIMEOUT": ["0", "-1", "nan", "inf", "100000"],
    "REFUND_AGENT_MAX_RETRIES": ["-1", "2.5", "nan", "inf", "21"],
    "REFUND_AGENT_OFFLINE_LATENCY": ["-0.1", "nan", "inf", "61"],
    "REFUND_AGENT_MAIL_CAP": ["0", "-1", "2.5", "nan", "inf", "101"],
    "REFUND_AGENT_MAIL_CAP_SECONDS": ["0", "59", "nan", "inf", "604801"],
    "REFUND_AGENT_CONCURRENCY": ["0", "-1", "2.5", "nan", "inf", "257"],
    "REFUND_AGENT_RATE_RPM": ["-1", "2.5", "nan", "inf", "10000001"],
    "REFUND_AGENT_RATE_TPM": ["-1", "2.5", "nan", "inf", "10000000001"],
    "REFUND_AGENT_RATE_PATIENCE": ["-1", "nan", "inf", "86401"],
}
GOOD = {
    "REFUND_AGENT_APPROVAL_DAYS": [("7", 7.0), ("0.5", 0.5), (str(1 / 86400), 1 / 86400),
                                   ("365", 365.0)],
    "REFUND_AGENT_LEASE_SECONDS": [("1", 1.0), ("900", 900.0), ("86400", 86400.0)],
    "REFUND_AGENT_TIMEOUT": [("1", 1.0), ("900", 900.0)],
    "REFUND_AGENT_MAX_RETRIES": [("0", 0), ("5", 5), ("20", 20), ("3.0", 3)],
    "REFUND_AGENT_OFFLINE_LATENCY": [("0", 0.0), ("1.5", 1.5), ("60", 60.0)],
    "REFUND_AGENT_MAIL_CAP": [("1", 1), ("5", 5), ("100", 100)],
    "REFUND_AGENT_MAIL_CAP_SECONDS": [("60", 60.0), ("3600", 3600.0), ("604800", 604800.0)],
    "REFUND_AGENT_CONCURRENCY": [("1", 1), ("8", 8), ("256", 256)],
    "REFUND_AGENT_RATE_RPM": [("0", 0), ("60", 60), ("10000000", 10_000_000)],
    "REFUND_AGENT_RATE_TPM": [("0", 0), ("200000", 200_000)],
    "REFUND_AGENT_RATE_PATIENCE": [("0", 0.0), ("900", 900.0), ("86400", 86400.0)],
}
FIELDS = {"REFUND_AGENT_APPROVAL_DAYS": "approval_days",
          "REFUND_AGENT_LEASE_SECONDS": "lease_seconds", "REFUND_AGENT_TIMEOUT": "timeout",
          "REFUND_AGENT_MAX_RETRIES": "max_retries",
          "REFUND_AGENT_OFFLINE_LATENCY": "offline_latency",
          "REFUND_AGENT_MAIL_CAP": "mail_cap", "REFUND_AGENT_MAIL_CAP_SECONDS": "mail_cap_seconds",
          "REFUND_AGENT_CONCURRENCY": "concurrency", "REFUND_AGENT_RATE_RPM": "rate_rpm",
          "REFUND_AGENT_RATE_TPM": "rate_tpm", "REFUND_AGENT_RATE_PATIENCE": "rate_patience"}


def test_every_numeric_setting_has_a_range_and_cases():
    assert set(RANGES) == set(BAD) == set(GOOD) == set(FIELDS)


@pytest.mark.parametrize(("name", "raw"), [(n, v) for n, vs in BAD.items() for v in vs])
def test_a_bad_value_is_refused_with_what_is_allowed(monkeypatch, name, raw):
    monkeypatch.setenv(name, raw)
    with pytest.raises(ConfigError) as caught:
        load_settings()
    message = str(caught.value)
    assert message.startswith(f"{name} must be ") and message.endswith(f", got {raw!r}.")
    assert f"to {RANGES[name].high:g}" in message and "\n" not in message


@pytest.mark.parametrize(("name", "raw", "value"),
                         [(n, r, v) for n, vs in GOOD.items() for r, v in vs])
def test_a_value_in_range_is_taken(monkeypatch, name, raw, value):
    monkeypatch.setenv(name, raw)
    assert getattr(load_settings(), FIELDS[name]) == value


@pytest.mark.parametrize(("field", "value"), [("lease_seconds", 0), ("approval_days", -1),
                                              ("approval_days", float("nan")),
                                              ("timeout", float("inf")),
                                              ("offline_latency", -1), ("max_retries", -1),
                                              ("mail_cap", 0), ("mail_cap_seconds", 0)])
def test_settings_made_in_code_cannot_break_the_loops(field, value):
    with pytest.raises(ConfigError, match=f"Settings.{field} must be"):
        Settings(**{field: value})
    Settings(lease_seconds=0.2)     # tests shorten the lease below the environment's bound


@pytest.mark.parametrize(("name", "raw"), [("REFUND_AGENT_APPROVAL_DAYS", "nan"),
                                           ("REFUND_AGENT_LEASE_SECONDS", "0")])
def test_the_terminal_shows_one_line_and_no_traceback(tmp_path, name, raw):
    result = run_cli(tmp_path / "output", "queue", **{name: raw})
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"error: {name} must be {RANGES[name].describe()}, got {raw!r}."]
    assert not (tmp_path / "output" / "refund-agent.sqlite3").exists()


def test_the_page_shows_the_message(tmp_path, monkeypatch):
    from helpers.page import open_page, shows

    monkeypatch.setenv("REFUND_AGENT_OUTPUT", str(tmp_path / "output"))
    monkeypatch.setenv("REFUND_AGENT_APPROVAL_DAYS", "-1")
    at = open_page()
    assert shows(at, "REFUND_AGENT_APPROVAL_DAYS must be a number of days from", "error")
    assert not at.exception


# -- a key with a character no key has (issue 33 item 8) ------------------------------------------

# A key pasted with curly quotes round it, or with an invisible space from a chat window in it.
PASTED = {"“xai-k3y-not-real”": (1, "U+201C LEFT DOUBLE QUOTATION MARK"),
          "xai-k3y\u200b-not-real": (8, "U+200B ZERO WIDTH SPACE"),
          "xai-k3y not-real": (8, "U+0020 SPACE")}


@pytest.mark.parametrize("key", list(PASTED))
def test_a_key_with_a_character_no_key_has_is_refused_naming_it_not_the_key(monkeypatch, key):
    position, named = PASTED[key]
    monkeypatch.setenv("XAI_API_KEY", key)
    with pytest.raises(ConfigError) as refused:
        load_settings()
    said = str(refused.value)
    assert "XAI_API_KEY" in said and f"position {position}" in said and named in said
    assert "k3y" not in said and "not-real" not in said   # the key itself is never shown
    with pytest.raises(ConfigError, match=f"position {position}"):
        Settings(api_key=key)                             # settings made in code too


@pytest.mark.parametrize("command", [["doctor"], ["sample", "damaged"]])
def test_the_terminal_names_the_bad_character_in_one_line(tmp_path, command):
    result = run_cli(tmp_path / "output", *command, XAI_API_KEY="“xai-k3y-not-real”",
                     REFUND_AGENT_BASE_URL="http://127.0.0.1:9/v1")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stderr and "UnicodeEncodeError" not in result.stderr
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("error: XAI_API_KEY") and "position 1" in line and "U+201C" in line
    assert "k3y" not in result.stdout + result.stderr


def test_the_approval_window_default_is_one_constant(monkeypatch):
    """Settings made in code and settings read from an environment without the variable get
    the same window: config.APPROVAL_DAYS, not two literals that can drift apart."""
    from refund_agent.config import APPROVAL_DAYS

    monkeypatch.delenv("REFUND_AGENT_APPROVAL_DAYS", raising=False)
    assert Settings().approval_days == load_settings().approval_days == APPROVAL_DAYS
