"""The provider's error bodies, read alike in either dialect (xAI's flat, OpenAI's nested)."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest


def error_fields(raw: Any) -> dict[str, Any]:
    """An error body in either dialect as {"message", "code", "param", "flat"}.

    ``raw`` is the parsed body, its text, or an SDK exception (its response's text is read).
    xAI's flat body has no param; its code is the gRPC status text.
    """
    response = getattr(raw, "response", None)
    if response is not None:
        raw = response.text
    if isinstance(raw, (str, bytes)):
        raw = json.loads(raw)
    inner = raw.get("error")
    if isinstance(inner, dict):
        assert set(raw) == {"error"} and set(inner) == {"message", "type", "param", "code"}
        return {**inner, "flat": False}
    assert set(raw) == {"code", "error"} and isinstance(inner, str), raw
    return {"message": inner, "code": raw["code"], "param": None, "flat": True}


@contextmanager
def refused(kind: type[BaseException], fragment: str | None = None, *, param: str | None = None,
            code: str | None = None) -> Iterator[Any]:
    """pytest.raises for an SDK status error, checked in the dialect the server speaks: the
    message holds ``fragment`` (a regular expression); in OpenAI's dialect, the nested body
    names ``param`` and ``code``; in xAI's, the body is flat (which carries neither)."""
    with pytest.raises(kind) as caught:
        yield caught
    fields = error_fields(caught.value)
    if fragment is not None:
        assert re.search(fragment, fields["message"]), fields
    flat = os.environ.get("REFUND_AGENT_OFFLINE_DIALECT", "xai") != "openai"
    assert fields["flat"] is flat, fields
    if not flat and param is not None:
        assert fields["param"] == param, fields
    if not flat and code is not None:
        assert fields["code"] == code, fields
