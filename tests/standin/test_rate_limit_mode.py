"""The stand-in's rate-limit mode: 429 with each provider's headers past a set pace.

Over loopback with the real openai SDK (retries off, so every answer is seen), in both
dialects; the pace itself with a clock the test moves.
"""

from __future__ import annotations

from pathlib import Path

import openai
import pytest

from offline_model import __main__ as offline_main
from offline_model import pacing, start_offline_server
from offline_model.pacing import Pace, Rate
from refund_agent.providers.table import read_error


@pytest.mark.parametrize(("text", "rate"), [
    ("60/min", Rate(60, 60.0)), ("10/s", Rate(10, 1.0)), ("600/10min", Rate(600, 600.0)),
    ("1000/h", Rate(1000, 3600.0)), (" 5 / 2s ", Rate(5, 2.0)), ("90/minute", Rate(90, 60.0))])
def test_a_pace_is_a_count_per_time(text, rate):
    assert pacing.parse_rate(text) == rate


@pytest.mark.parametrize("text", ["", "60", "0/min", "60/fortnight", "ten/s", "60/0s"])
def test_anything_else_is_refused_naming_the_forms(text):
    with pytest.raises(ValueError, match="like 60/min"):
        pacing.parse_rate(text)


def test_the_pace_counts_a_sliding_window_exactly():
    now = [0.0]
    pace = Pace(Rate(3, 10.0), clock=lambda: now[0])
    verdicts = []
    for t in (0.0, 1.0, 2.0, 3.0, 9.9, 10.0, 10.5):
        now[0] = t
        verdicts.append(pace.take())
    assert [v.accepted for v in verdicts] == [True, True, True, False, False, True, False]
    refused = verdicts[3]
    assert refused.remaining == 0
    assert refused.retry_after == pytest.approx(7.0)   # the oldest leaves at 10.0
    assert refused.reset == pytest.approx(9.0)         # all three gone at 12.0
    assert pace.accepted == [0.0, 1.0, 2.0, 10.0] and pace.refused == [3.0, 9.9, 10.5]


def test_each_dialect_sends_its_own_headers():
    accepted = pacing.Verdict(True, 60, 12, 41.5, 0.0)
    refused = pacing.Verdict(False, 60, 0, 59.2, 0.4)
    assert pacing.headers(accepted, "openai") == {
        "x-ratelimit-limit-requests": "60", "x-ratelimit-remaining-requests": "12",
        "x-ratelimit-reset-requests": "41.5s"}
    assert pacing.headers(refused, "openai")["retry-after-ms"] == "400"
    assert pacing.headers(refused, "openai")["retry-after"] == "1"
    assert pacing.headers(refused, "openai")["x-ratelimit-reset-requests"] == "59.2s"
    assert pacing.headers(accepted, "xai") == {}
    assert pacing.headers(refused, "xai") == {"retry-after": "1"}
    assert pacing.go_duration(360.0) == "6m0s" and pacing.go_duration(0.012) == "12ms"


@pytest.mark.parametrize("dialect", ["openai", "xai"])
def test_past_the_pace_the_sdk_meets_a_rate_limit_it_may_retry(tmp_path: Path, dialect):
    server = start_offline_server(tmp_path / "s.sqlite3", dialect=dialect, rate_limit="2/min")
    client = openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0)
    try:
        for _ in range(2):
            raw = client.responses.with_raw_response.create(model="grok-4.7", input="hi")
            if dialect == "openai":
                assert raw.headers["x-ratelimit-limit-requests"] == "2"
            else:
                assert "x-ratelimit-limit-requests" not in raw.headers
        assert raw.headers.get("x-ratelimit-remaining-requests") in (None, "0")
        with pytest.raises(openai.RateLimitError) as caught:
            client.responses.create(model="grok-4.7", input="hi")
        response = caught.value.response
        assert 55 <= int(response.headers["retry-after"]) <= 60
        # The project reads it as a rate limit (worth waiting out), not a lack of credits.
        error = read_error(429, response.text)
        assert error.kind == "rate_limit" and error.retry
        if dialect == "xai":
            assert response.json()["code"] == "Some resource has been exhausted"
        else:
            assert response.json()["error"]["code"] == "rate_limit_exceeded"
            assert int(response.headers["retry-after-ms"]) > 50_000
        # Refused requests are not processed: nothing recorded, nothing answered.
        assert len(server.requests) == 2
        assert len(server.pace.accepted) == 2 and len(server.pace.refused) == 1
    finally:
        server.close()


def test_the_command_takes_a_rate_limit(capsys):
    assert offline_main.parse_args(["--rate-limit", "60/min"]).rate_limit == "60/min"
    assert offline_main.main(["--rate-limit", "sixty"]) == 2
    assert "--rate-limit: a rate limit is a count per time" in capsys.readouterr().err
