"""What the test modules share: plain functions and classes, importable as ``helpers.<module>``
(pyproject.toml puts tests/ on pytest's ``pythonpath``); fixtures stay in tests/conftest.py.

- ``cli``: a ``refund-agent`` command as a new process (``run_cli``, ``cli_env``), the same
  forked from a warm interpreter (``run_forked``), the backend of the running test.
- ``forkserver``: the server ``run_forked`` uses.
- ``crash``: what a crash case reads back (``read_outcome``, ``Outcome``), the exactly-once
  checks (``measure``, ``assert_held``), the reliability log (``record``), the crash-free
  baselines and the kill-and-resume steps.
- ``errors``: the provider's error bodies in either dialect (``error_fields``, ``refused``).
- ``pg``: the throwaway PostgreSQL cluster and the ``Backend`` a test stores on.
- ``powerloss``, ``powerloss_recover``: the disk model behind the power-loss states and the
  fork server that recovers them.
- ``page``: the page under Streamlit's AppTest (``open_page``, ``shows``, ``eventually``, ...).
- ``browser``: the page in Chromium (``AppServer``, ``sign_in``, the Playwright fixtures).
"""
