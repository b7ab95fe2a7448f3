"""Email over SMTP, against aiosmtpd: a real SMTP server others wrote, run on loopback.

The server runs in this process (a thread of aiosmtpd's Controller) and keeps every message
it accepted, so each test counts what was delivered: one message per email call, its
``Message-ID`` derived from the call key, and, when a process dies between handing a message
to the server and marking it sent, one duplicate at most, said plainly (never a lost email).
"""

from __future__ import annotations

import shutil
import ssl
import subprocess
from collections import Counter
from contextlib import ExitStack
from pathlib import Path

import pytest
from helpers.cli import run_cli
from helpers.outside_servers import SMTP_PASSWORD as PASSWORD
from helpers.outside_servers import SMTP_USER as USER
from helpers.outside_servers import smtp_server

pytest.importorskip("aiosmtpd")

from refund_agent.desk.records import DeskStore
from refund_agent.errors import (
    EmailNotSent,  # noqa: E402
    RunNotReady,  # noqa: E402
)
from refund_agent.outside import RESENT_EMAIL  # noqa: E402
from refund_agent.outside.config import OutsideSettings  # noqa: E402
from refund_agent.outside.ledger import IdempotentLog  # noqa: E402
from refund_agent.outside.smtp import SmtpOutbox, message_id  # noqa: E402
from refund_agent.web import views  # noqa: E402

FROM = "help@juniperpine.example"


@pytest.fixture(scope="module")
def certificate(tmp_path_factory) -> Path | None:
    """A self-signed certificate for 127.0.0.1 (openssl), or None where there is no openssl."""
    if shutil.which("openssl") is None:
        return None
    where = tmp_path_factory.mktemp("tls")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(where / "key.pem"), "-out", str(where / "cert.pem")],
                   check=True, capture_output=True)
    return where


@pytest.fixture(scope="module")
def servers(certificate):
    """aiosmtpd three ways on loopback: plain (login allowed without TLS, as some relays do),
    STARTTLS, and TLS from the first byte. Yields {security: (port, mailbox)}."""
    found = {}
    tls = None
    if certificate is not None:
        tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        tls.load_cert_chain(certificate / "cert.pem", certificate / "key.pem")
    kinds = {"none": {"auth_require_tls": False}}
    if tls is not None:
        kinds["starttls"] = {"tls_context": tls, "require_starttls": True}
        # aiosmtpd does not count TLS from the first byte as TLS when it decides whether to
        # offer AUTH (it knows only STARTTLS), so it is told to offer it: the line is TLS.
        kinds["tls"] = {"ssl_context": tls, "auth_require_tls": False}
    with ExitStack() as running:
        for security, extra in kinds.items():
            found[security] = running.enter_context(smtp_server(**extra))
        yield found


def smtp_settings(port: int, security: str = "none", password: str = PASSWORD,
                  ca: Path | None = None) -> OutsideSettings:
    return OutsideSettings(email="smtp", smtp_host="127.0.0.1", smtp_port=port,
                           smtp_user=USER, smtp_password=password, smtp_security=security,
                           smtp_from=FROM, smtp_timeout=10,
                           smtp_ca_file=str(ca / "cert.pem") if ca else "")


def test_each_call_sends_one_message_whose_id_comes_from_the_call(tmp_path, servers):
    port, box = servers["none"]
    box.clear()
    outbox = SmtpOutbox(tmp_path, None, smtp_settings(port), FROM)
    record, reused = outbox.send("run_1-call_a", "maya.chen@example.com", "Re: Cracked", "Hi")
    assert not reused and record["message_id"] == "<run_1-call_a.refund-agent@juniperpine.example>"
    again, reused = outbox.send("run_1-call_a", "maya.chen@example.com", "Re: Cracked", "Hi")
    assert reused and again["message_id"] == record["message_id"]
    assert len(box.messages) == 1 and box.logins == [USER]
    sent = box.messages[0]
    assert sent["Message-ID"] == message_id("run_1-call_a", FROM) == record["message_id"]
    assert (sent["From"], sent["To"], sent["Subject"]) == (FROM, "maya.chen@example.com",
                                                           "Re: Cracked")
    assert sent.get_payload().strip() == "Hi"
    assert outbox.unsent() == [] and outbox.resent() == []


@pytest.mark.parametrize("security", ["starttls", "tls"])
def test_starttls_and_tls_with_login(tmp_path, servers, certificate, security):
    if security not in servers:
        pytest.skip("openssl is needed to make the test server's certificate")
    port, box = servers[security]
    box.clear()
    outbox = SmtpOutbox(tmp_path, None, smtp_settings(port, security, ca=certificate), FROM)
    outbox.send("run_2-call_b", "tom.becker@example.com", "Re: Mixer", "Hello")
    assert [m["Message-ID"] for m in box.messages] == [message_id("run_2-call_b", FROM)]
    assert box.logins == [USER]


def test_an_untrusted_certificate_is_refused(tmp_path, servers):
    if "starttls" not in servers:
        pytest.skip("openssl is needed to make the test server's certificate")
    port, box = servers["starttls"]
    box.clear()
    outbox = SmtpOutbox(tmp_path, None, smtp_settings(port, "starttls"), FROM)  # no CA file
    with pytest.raises(EmailNotSent, match="Could not send the email"):
        outbox.send("run_3-call_c", "tom.becker@example.com", "Re: x", "Hello")
    assert box.messages == [] and [r["idempotency_key"] for r in outbox.unsent()] == \
        ["run_3-call_c"]


def test_a_refused_login_is_said_plainly_and_resume_sends_it_once(tmp_path, servers):
    port, box = servers["none"]
    box.clear()
    wrong = SmtpOutbox(tmp_path, None, smtp_settings(port, password="nope"), FROM)
    with pytest.raises(EmailNotSent, match="refused the login for SMTP_USER 'desk'"):
        wrong.send("run_4-call_d", "maya.chen@example.com", "Re: x", "Hi")
    assert box.messages == [] and len(wrong.unsent()) == 1
    right = SmtpOutbox(tmp_path, None, smtp_settings(port), FROM)
    right.send("run_4-call_d", "maya.chen@example.com", "Re: x", "Hi")
    assert len(box.messages) == 1 and right.unsent() == []


@pytest.mark.parametrize(("to", "subject"), [
    ("maya.chen@example.com\nBcc: x@evil.example", "Hi"),
    ("maya.chen@example.com", "Hi\r\nBcc: x@evil.example")])
def test_header_injection_is_refused_before_anything_is_recorded(tmp_path, servers, to, subject):
    port, box = servers["none"]
    box.clear()
    outbox = SmtpOutbox(tmp_path, None, smtp_settings(port), FROM)
    with pytest.raises(RunNotReady):
        outbox.send("run_5-call_e", to, subject, "Hi")
    assert box.messages == [] and outbox.messages() == []


def test_a_message_recorded_for_smtp_is_not_taken_as_sent_by_the_stand_in(tmp_path, servers):
    """A process killed between the record and the send, resumed where REFUND_AGENT_EMAIL is
    not set (another host, a cron job without the settings): the stand-in must not take the
    SMTP record for a sent email, or the email is lost without a word. It refuses in one line,
    nothing changes, and a resume with SMTP sends it once; a message SMTP did mark sent is
    reused by the stand-in as by SMTP itself."""
    from helpers.outside_servers import free_port

    from refund_agent.errors import ConfigError
    from refund_agent.outside.email import StandInOutbox
    port, box = servers["none"]
    box.clear()
    nobody = SmtpOutbox(tmp_path, None, smtp_settings(free_port()), FROM)   # nothing listens
    with pytest.raises(EmailNotSent):
        nobody.send("run_6-call_f", "maya.chen@example.com", "Re: x", "Hi")
    with pytest.raises(ConfigError, match="REFUND_AGENT_EMAIL=smtp") as caught:
        StandInOutbox(tmp_path).send("run_6-call_f", "maya.chen@example.com", "Re: x", "Hi")
    assert "\n" not in str(caught.value) and message_id("run_6-call_f", FROM) in str(caught.value)
    assert len(nobody.unsent()) == 1 and len(nobody.messages()) == 1
    SmtpOutbox(tmp_path, None, smtp_settings(port), FROM).send(
        "run_6-call_f", "maya.chen@example.com", "Re: x", "Hi")
    assert [m["Message-ID"] for m in box.messages] == [message_id("run_6-call_f", FROM)]
    record, reused = StandInOutbox(tmp_path).send("run_6-call_f", "maya.chen@example.com",
                                                  "Re: x", "Hi")
    assert reused and record["message_id"] == message_id("run_6-call_f", FROM)
    assert len(box.messages) == 1


def test_mail_the_stand_in_recorded_before_smtp_was_switched_on_is_not_unsent(tmp_path, servers):
    """A desk that ran on the stand-in and then switched SMTP on: the stand-in's old records
    (outbox.log, Message-IDs msg_...) were never SMTP's to send, so `audit --verify` does not
    report them as "recorded but never marked sent" (which would fail it for good, telling
    the team to resume runs that are long done); SMTP's own unsent records still are."""
    from helpers.outside_servers import free_port

    from refund_agent.desk.reconcile import email_notes
    from refund_agent.outside.email import StandInOutbox
    port, box = servers["none"]
    box.clear()
    StandInOutbox(tmp_path).send("run_7-call_g", "maya.chen@example.com", "Re: x", "Hi")
    smtp = SmtpOutbox(tmp_path, None, smtp_settings(port), FROM)
    assert smtp.unsent() == [] and email_notes(smtp) == ([], [])
    with pytest.raises(EmailNotSent):
        SmtpOutbox(tmp_path, None, smtp_settings(free_port()), FROM).send(
            "run_7-call_h", "maya.chen@example.com", "Re: y", "Hi")
    assert [r["idempotency_key"] for r in smtp.unsent()] == ["run_7-call_h"]
    assert box.messages == []


@pytest.mark.parametrize("where", ["rcpt", "data"])
def test_a_refused_send_then_a_resend_is_not_reported_as_a_crash(tmp_path, servers, where):
    """The server answers the first attempt 550 (at RCPT or after the data): that attempt
    delivered nothing, so the resend is one email, not "sent again after a crash"; audit
    --verify's notes say it was refused, then sent. A retry cut off after a refusal (the
    connection lost mid-send) may have reached the server: the next send says so again."""
    from refund_agent.desk.reconcile import email_notes
    port, box = servers["none"]
    box.clear()
    getattr(box, f"refuse_{where}").append("550 5.7.1 Not today")
    outbox = SmtpOutbox(tmp_path, None, smtp_settings(port), FROM)
    with pytest.raises(EmailNotSent, match="refused"):
        outbox.send("run_8-call_i", "maya.chen@example.com", "Re: x", "Hi")
    problems, _ = email_notes(outbox)
    assert box.messages == [] and len(problems) == 1 and "550 5.7.1 Not today" in problems[0]
    record, reused = outbox.send("run_8-call_i", "maya.chen@example.com", "Re: x", "Hi")
    assert not reused and not record.get("resent")
    assert outbox.resent() == [] and len(box.messages) == 1
    problems, notes = email_notes(outbox)
    assert problems == [] and len(notes) == 1 and "refused by the server (1x), then sent" in \
        notes[0] and "twice" not in notes[0]
    assert outbox.send("run_8-call_i", "maya.chen@example.com", "Re: x", "Hi")[1]   # reused

    # Refused, then an attempt that may have gone out: the third send is a possible duplicate.
    box.refuse_data.append("451 4.3.0 Try later")
    with pytest.raises(EmailNotSent, match="451"):
        outbox.send("run_9-call_j", "maya.chen@example.com", "Re: y", "Hi")
    real = outbox._deliver

    def cut_off(message):
        real(message)
        raise EmailNotSent("the connection dropped before the server answered")
    outbox._deliver = cut_off
    with pytest.raises(EmailNotSent):
        outbox.send("run_9-call_j", "maya.chen@example.com", "Re: y", "Hi")
    assert "may then have it twice" in email_notes(outbox)[0][0]   # no longer "refused"
    outbox._deliver = real
    record, _ = outbox.send("run_9-call_j", "maya.chen@example.com", "Re: y", "Hi")
    assert record.get("resent") and [r["idempotency_key"] for r in outbox.resent()] == \
        ["run_9-call_j"]
    assert len(box.messages) == 3   # run_8 once, run_9 twice (the cut-off one arrived)


# -- the crash matrix, over SMTP ----------------------------------------------------------------

def smtp_env(port: int) -> dict[str, str]:
    return {"REFUND_AGENT_EMAIL": "smtp", "SMTP_HOST": "127.0.0.1", "SMTP_PORT": str(port),
            "SMTP_USER": USER, "SMTP_PASSWORD": PASSWORD, "SMTP_SECURITY": "none"}


@pytest.mark.parametrize("point", ["email_recorded", "after_smtp_send", "after_email"])
def test_a_crash_around_the_send_loses_no_email_and_is_never_silent(tmp_path, servers, point):
    """The damaged-item sample approved in a process killed at ``point`` while emailing, then
    resumed: every email call reaches the server, once (or, killed between the server taking
    it and the outbox marking it, twice with one Message-ID, and said so)."""
    port, box = servers["none"]
    box.clear()
    out, env = tmp_path / "out", smtp_env(port)
    assert run_cli(out, "sample", "damaged", **env).returncode == 0
    before = len(box.messages)
    killed = run_cli(out, "approve", "--as", "Dana Kim", **env, REFUND_AGENT_CRASH_AT=point)
    assert killed.returncode == -9, killed.stdout + killed.stderr
    if point == "email_recorded":   # recorded, not sent: audit --verify says so
        told = run_cli(out, "audit", "--verify", **env)
        assert told.returncode == 1 and "never marked sent" in told.stdout
        assert len(box.messages) == before
    resumed = run_cli(out, "resume", **env)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr

    calls = [r["idempotency_key"] for r in IdempotentLog(out / "outbox.log").records()]
    ids = Counter(m["Message-ID"].strip() for m in box.messages)
    assert set(ids) == {message_id(key, FROM) for key in calls}   # none lost, none foreign
    twice = [i for i, n in ids.items() if n > 1]
    if point == "after_smtp_send":
        assert len(twice) == 1 and ids[twice[0]] == 2   # at most one duplicate...
        verified = run_cli(out, "audit", "--verify", **env)
        assert verified.returncode == 0 and "may have it twice" in verified.stdout  # ...said
        store = DeskStore(out / "refund-agent.sqlite3")
        steps = [s for run in store.runs() for s in store.steps(run.id)]
        assert any(s.data.get("resent") for s in steps if s.kind == "message")
        assert RESENT_EMAIL in resumed.stdout          # the terminal says so as it happens
        titles = [b.title for b in views.timeline(steps) if b.kind == "message"]
        assert sum(RESENT_EMAIL in t for t in titles) == 1   # and the ticket's timeline
    else:
        # Killed before the hand-over, the resend cannot know the server never got it, so it
        # says so too (conservatively); killed after the mark, nothing is sent again.
        assert (RESENT_EMAIL in resumed.stdout) == (point == "email_recorded")
        assert twice == []
        assert run_cli(out, "audit", "--verify", **env).returncode == 0


# -- configuration -------------------------------------------------------------------------------

@pytest.mark.parametrize(("env", "words"), [
    ({"REFUND_AGENT_EMAIL": "smtp"}, "REFUND_AGENT_EMAIL=smtp needs SMTP_HOST"),
    ({"REFUND_AGENT_EMAIL": "pigeon"}, "REFUND_AGENT_EMAIL must be stand-in or smtp"),
    ({"REFUND_AGENT_EMAIL": "smtp", "SMTP_HOST": "h", "SMTP_SECURITY": "ssl"},
     "SMTP_SECURITY must be starttls, tls or none"),
    ({"SMTP_PORT": "99999"}, "SMTP_PORT must be a port number"),
    ({"REFUND_AGENT_PAYMENTS": "stripe"}, "REFUND_AGENT_PAYMENTS=stripe needs STRIPE_API_KEY"),
    ({"REFUND_AGENT_PAYMENTS": "paypal"}, "REFUND_AGENT_PAYMENTS must be stand-in or stripe"),
    ({"REFUND_AGENT_RECEIVE_ADDRESSES": "help@shop.example, refunds"},
     "REFUND_AGENT_RECEIVE_ADDRESSES must be addresses or @domains"),
    ({"REFUND_AGENT_RECEIVE_USER": "mta"}, "REFUND_AGENT_RECEIVE_USER needs "
                                           "REFUND_AGENT_RECEIVE_PASSWORD"),
])
def test_outside_settings_refused_in_one_line(monkeypatch, env, words):
    from refund_agent.config import load_settings
    from refund_agent.errors import ConfigError
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match=words) as caught:
        load_settings()
    assert "\n" not in str(caught.value)


def test_the_secrets_stay_out_of_the_settings_repr(monkeypatch):
    from refund_agent.config import load_settings
    monkeypatch.setenv("REFUND_AGENT_EMAIL", "smtp")
    monkeypatch.setenv("SMTP_HOST", "smtp.example.com")
    monkeypatch.setenv("SMTP_PASSWORD", "hunter2-smtp")
    monkeypatch.setenv("REFUND_AGENT_PAYMENTS", "stripe")
    monkeypatch.setenv("STRIPE_API_KEY", "sk_live_hunter2")
    monkeypatch.setenv("STRIPE_WEBHOOK_SECRET", "whsec_hunter2")
    monkeypatch.setenv("REFUND_AGENT_RECEIVE_USER", "mta")
    monkeypatch.setenv("REFUND_AGENT_RECEIVE_PASSWORD", "hunter2-listener")
    settings = load_settings()
    assert settings.outside.port == 587 and settings.outside.smtp_password == "hunter2-smtp"
    shown = repr(settings)
    assert "hunter2" not in shown and "smtp.example.com" in shown


def test_without_the_stripe_library_both_stripe_paths_say_so_in_one_line(tmp_path, monkeypatch,
                                                                         capsys):
    """stripe is an optional extra: a plain install without it gets a one-line message, no
    traceback, from the payments adapter and from `refund-agent webhooks`."""
    import sys

    from refund_agent.cli import main
    from refund_agent.config import load_settings
    from refund_agent.errors import ConfigError
    from refund_agent.outside import open_payments
    monkeypatch.setitem(sys.modules, "stripe", None)   # `import stripe` now raises ImportError
    for name in ("refund_agent.outside.stripe", "refund_agent.outside.webhooks"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.setenv("REFUND_AGENT_OUTPUT", str(tmp_path))
    monkeypatch.setenv("REFUND_AGENT_PAYMENTS", "stripe")
    monkeypatch.setenv("STRIPE_API_KEY", "sk_test_x")
    with pytest.raises(ConfigError, match=r"pip install 'refund-agent\[stripe\]'"):
        open_payments(load_settings(), None, lambda _order: None)
    monkeypatch.setenv("REFUND_AGENT_PAYMENTS", "")
    assert main(["webhooks", "--port", "0"]) != 0
    err = capsys.readouterr().err
    assert "refund-agent webhooks needs the stripe library" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
