"""``python -m offline_model``: a command-line mistake is one line, not a traceback."""

from __future__ import annotations

import pytest

from offline_model import __main__ as offline_main


def test_a_port_out_of_range_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as stop:
        offline_main.parse_args(["--port", "99999"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "must be a port from 0 (a free one) to 65535, got '99999'" in err
    assert "Traceback" not in err


def test_an_address_it_cannot_listen_on_is_named_in_one_line(tmp_path, capsys, monkeypatch):
    # main() takes over SIGINT and SIGTERM for its server; not in the test's own process.
    monkeypatch.setattr(offline_main.signal, "signal", lambda *args: None)
    state = tmp_path / "state.sqlite3"
    assert offline_main.main(["--host", "256.1.1.1", "--port", "0", "--state", str(state)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: cannot serve on 256.1.1.1:0 with state ")
    assert len(err.splitlines()) == 1


def test_its_help_names_the_command_to_run(capsys):
    """A stranger running the package alone is shown the command itself, not a file name."""
    with pytest.raises(SystemExit) as stop:
        offline_main.parse_args(["--help"])
    assert stop.value.code == 0
    assert capsys.readouterr().out.startswith("usage: python -m offline_model ")
