"""The page trusts no one it has not signed in, and shows outside text as text (issue 21: 7, 8,
10). Streamlit's AppTest, no browser; tests/web/test_web_security.py has the same in Chromium."""

from __future__ import annotations

from helpers import page
from helpers.page import APP, TIMEOUT, add_accounts, open_page, shows, sign_in, start_damaged
from streamlit.testing.v1 import AppTest

from refund_agent.desk.accounts import Accounts
from refund_agent.web.views import md

# The page tests' fixtures: a fresh output folder for the page, and its store.
output, store = page.output, page.store

# A ticket id as an attacker would write it into a link to the desk.
HOSTILE_RUN = ("[Open the refund](https://evil.example/pay) ![x](https://evil.example/t.png) "
               ":red[**Approved by Lee Park**]")


def open_link(run: str) -> AppTest:
    """A new session opened from a link to the desk with ``?run=RUN``."""
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    at.query_params["run"] = run
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def all_text(at) -> str:
    return " ".join(str(el.value) for kind in ("markdown", "caption", "success", "warning",
                                               "error", "info", "toast") for el in at.get(kind))


def test_a_visitor_with_accounts_on_sees_only_the_sign_in_form(output, store):
    at = open_page()
    approval = start_damaged(at, store)          # demo mode: a ticket with the customer's email
    add_accounts(store)
    visitor = open_link(approval.run_id)   # a link straight to the ticket
    # Nothing but the form: no ticket, email, address, card, audit table, download or button.
    assert [b.key for b in visitor.button] == ["sign_in"]
    assert not visitor.dataframe and not visitor.get("download_button")
    assert not visitor.text_area and {t.key for t in visitor.text_input} == {
        "signin_name", "signin_password"}
    shown = all_text(visitor)
    for secret in ("maya", "Maya", "A1043", "$48.00", "Audit log", approval.run_id):
        assert secret not in shown, secret
    # Signed in, the same session sees the desk.
    sign_in(visitor, "Lee Park", "lee-password")
    assert shows(visitor, "Signed in as Lee Park", "markdown")
    assert shows(visitor, "Proposed refund $48.00 on order A1043", "warning")


def test_a_session_ends_when_its_account_is_removed_and_added_again(output, store):
    """Removing and re-adding is the password reset: the old session must not carry over,
    let alone with the new account's role and limit."""
    add_accounts(store)
    at = open_page()
    sign_in(at, "Lee Park", "lee-password")
    assert shows(at, "Signed in as Lee Park · lead, no limit", "markdown")
    accounts = Accounts(store)
    accounts.remove("Lee Park", by="ops (login)")
    accounts.add("Lee Park", "approver", "a-new-password", limit=10, by="ops (login)")
    at.run()
    assert not shows(at, "Signed in as", "markdown")
    assert shows(at, "Your account was removed or changed since you signed in", "warning")
    assert [b.key for b in at.button] == ["sign_in"]
    assert not at.session_state["account"]
    # The new password signs in again, with the new role.
    sign_in(at, "Lee Park", "a-new-password")
    assert shows(at, "Signed in as Lee Park · approver, up to $10.00", "markdown")


def test_the_run_query_parameter_is_shown_as_text(output):
    at = open_link(HOSTILE_RUN)
    (info,) = [el for el in at.info if "is not in this desk's store" in el.value]
    # The id is escaped: Markdown shows it character for character, no link, image or colour.
    assert md(HOSTILE_RUN) in info.value and HOSTILE_RUN not in info.value


def test_notices_show_outside_text_as_text(output, store):
    """A refusal quotes what the user or the model wrote (an address here): it stays text."""
    at = open_page()
    at.text_input(key="mail_from").input("[x](https://evil.example)")
    at.text_area(key="mail_body").input("Refund please.")
    at.button(key="mail_send").click().run()
    (error,) = [el for el in at.error if "is not an email address" in el.value]
    assert "[x](https://evil.example)" not in error.value
    assert md("[x](https://evil.example)") in error.value


def test_a_signed_out_session_cannot_act_through_a_form_it_still_holds(output, store):
    """The form was drawn while signed in; the account is removed before it is sent. The
    callback runs before the page is drawn again, so it checks the sign-in itself."""
    add_accounts(store)
    at = open_page()
    sign_in(at, "Lee Park", "lee-password")
    at.text_input(key="mail_from").input("maya.chen@example.com")
    at.text_area(key="mail_body").input("Order A1043: the coffee maker arrived shattered.")
    Accounts(store).remove("Lee Park", by="ops (login)")
    at.button(key="mail_send").click().run()
    assert store.runs(limit=5) == []              # no ticket made, no agent run
    assert [b.key for b in at.button] == ["sign_in"]
    assert shows(at, "Your account was removed or changed since you signed in", "warning")
