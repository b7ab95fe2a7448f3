"""Who a message is from, whether it is a redelivery, and whether a robot wrote it (issue #43).

The sender is the address mail clients and DMARC read, never a display name: a From whose
parse has defects, that names several mailboxes, or whose display name is an address other than
the real one is refused or flagged, never matched to a customer. A Message-ID reused by another
sender is recorded and flagged, not dropped. A customer's first message is never judged
automatic by its subject alone; the subject guess applies to replies on the desk's threads.
"""

from __future__ import annotations

from email import message_from_bytes
from email.policy import default as default_policy
from email.utils import formataddr

import pytest
from helpers.mail import MAYA, mail
from hypothesis import given, settings
from hypothesis import strategies as st

from refund_agent.desk.records import DeskStore
from refund_agent.intake import same_address
from refund_agent.outside.mailin.decide import decide
from refund_agent.outside.mailin.intake import take
from refund_agent.outside.mailin.parse import read_mail
from refund_agent.outside.mailin.rows import MailThread

THREAD = MailThread("run_maya", MAYA, takes_reply=True)
EVIL = "evil@x.test"


def from_header(value: str, *more: str, **headers: str) -> bytes:
    """A message with this From header (and ``more`` From headers) written as given."""
    lines = [f"From: {value}", *(f"From: {m}" for m in more), "To: help@juniperpine.example",
             "Subject: Re: Cracked carafe", "Message-ID: <x@sender.example>",
             "In-Reply-To: <first@maya.example>",
             *(f"{k.replace('_', '-')}: {v}" for k, v in headers.items()), "",
             "Please refund it to this card instead."]
    return "\r\n".join(lines).encode()


@pytest.mark.parametrize(("value", "more", "kinds"), [
    # What mail clients show and DMARC aligns on is evil@x.test; Python's parser once read Maya.
    (f"{MAYA} <{EVIL}>", (), {"refused"}),
    (f'"{MAYA}" <{EVIL}>', (), {"flagged"}),
    (f'"Maya Chen ({MAYA})" <{EVIL}>', (), {"flagged"}),
    (f'"{EVIL}" <{MAYA}>', (), {"flagged"}),   # her address, but someone else's name on it
    (f"{EVIL}, {MAYA}", (), {"refused"}),
    (f"Maya Chen <{MAYA}>", (f"<{EVIL}>",), {"refused"}),   # two From headers
    (f"Maya <{MAYA}> <{EVIL}>", (), {"refused"}),
])
def test_a_from_that_clients_read_otherwise_is_never_the_customer(value, more, kinds):
    read = read_mail(from_header(value, *more))
    for thread in (THREAD, None):
        kind, why = decide(read, thread)
        assert kind in kinds and why, (value, kind, why)
    assert read.sender in ("", EVIL) or "flagged" in kinds
    assert read.sender_name != MAYA


@pytest.mark.parametrize("value", [f"Maya Chen <{MAYA}>", f'"{MAYA}" <{MAYA}>', MAYA,
                                   f"=?utf-8?q?Maya_Ch=C3=A9n?= <{MAYA}>",
                                   f'"Chen, Maya" <{MAYA.upper()}>'])
def test_the_customers_own_from_continues_her_thread(value):
    read = read_mail(from_header(value))
    assert same_address(read.sender, MAYA)
    assert decide(read, THREAD) == ("reply", "")


# Display names a sender may write: words, addresses (hers, theirs), and both together.
_NAMES = st.one_of(
    st.text(st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp")), max_size=30),
    st.sampled_from([MAYA, MAYA.upper(), EVIL, f"Maya Chen <{MAYA}>", f"{MAYA} (Maya)",
                     "help@juniperpine.example", "Maya Chen"]),
    st.emails().map(str))
_ADDRESSES = st.one_of(st.sampled_from([MAYA, "Maya.Chen@Example.com", EVIL,
                                        "leo.martins@example.com"]), st.emails().map(str))


@settings(max_examples=300, deadline=None)
@given(name=_NAMES, address=_ADDRESSES, written=st.sampled_from(["formataddr", "raw"]))
def test_whatever_the_display_name_says_the_sender_is_the_address_clients_read(
        name, address, written):
    """The oracle is the standard library's RFC 5322 reading (email.headerregistry, as mail
    clients and DMARC read the header): when it reads one mailbox plainly, that address is
    the sender; otherwise the message is refused. The customer's thread continues only for
    her own address under a name that is not another address."""
    value = formataddr((name, address)) if written == "formataddr" else f"{name} <{address}>"
    raw = from_header(value)
    header = message_from_bytes(raw, policy=default_policy)["From"]
    read = read_mail(raw)
    kind, _why = decide(read, THREAD)
    plain = not header.defects and len(header.addresses) == 1
    if not plain:
        assert kind == "refused" and read.sender == ""
    else:
        assert read.sender == header.addresses[0].addr_spec
    if kind in ("reply", "held"):
        assert plain and same_address(read.sender, MAYA)
        assert not any(same_address(w, EVIL) for w in header.addresses[0].display_name.split())
    if same_address(name.strip(), EVIL) and not same_address(address, EVIL):
        assert kind not in ("reply", "held", "ticket")


# -- robots by headers; subjects only on the desk's own threads ----------------------------------

@pytest.mark.parametrize("subject", ["Out of office chair arrived cracked",
                                     "Returned mail: the lamp I sent back",
                                     "Automatic reply wanted? No, a refund",
                                     "Delivery Status Notification: my order never came"])
def test_a_customers_first_message_is_never_automatic_by_its_subject(subject):
    read = read_mail(bytes(mail(subject=subject)))
    assert decide(read, None) == ("ticket", "")
    # The same subject on a reply to the desk's own thread is an auto-answer's guess.
    on_thread = read_mail(bytes(mail(subject=subject, In_Reply_To="<first@maya.example>")))
    kind, why = decide(on_thread, THREAD)
    assert kind == "auto" and "subject" in why


@pytest.mark.parametrize("headers", [{"Auto_Submitted": "auto-replied"},
                                     {"Precedence": "bulk"}, {"X_Autoreply": "yes"},
                                     {"Return_Path": "<>"}])
def test_headers_show_a_robot_on_any_message(headers):
    read = read_mail(bytes(mail(subject="Cracked carafe", **headers)))
    assert decide(read, None)[0] in ("auto", "bounce")


# -- a Message-ID reused by another sender ---------------------------------------------------

def test_a_message_id_reused_by_another_sender_is_recorded_and_flagged(tmp_path):
    store = DeskStore(tmp_path / "refund-agent.sqlite3")
    first = take(store, bytes(mail()), "refunds")
    again = take(store, bytes(mail(body="Sent again by her mail client, reworded.")), "refunds")
    assert first.kind == "ticket" and again.new is False   # her redelivery: nothing new
    leo = mail(sender="Leo Martins <leo.martins@example.com>", subject="My lamp",
               body="My order A1058: the lamp is broken.")
    other = take(store, bytes(leo), "refunds")
    assert other.new and other.kind == "flagged" and other.run_id not in (None, first.run_id)
    assert "<first@maya.example>" in other.note and MAYA in other.note
    assert other.message_id != "<first@maya.example>"
    assert "mail_flagged" in [e.event for e in store.audit()]
    assert store.run(other.run_id).sender == "leo.martins@example.com"
    # Leo's own redelivery of it is found again, not recorded twice.
    assert take(store, bytes(leo), "refunds").new is False
    assert len(store.mail()) == 2 and len(store.runs()) == 2
    store.close()
