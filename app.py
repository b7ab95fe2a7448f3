"""The helpdesk page in a checkout: ``streamlit run app.py`` (or ``./dev web``). The page script
ships in the package, refund_agent/web/app/streamlit_app.py, which ``refund-agent web`` runs."""

import runpy

runpy.run_module("refund_agent.web.app.streamlit_app", run_name="__main__")
