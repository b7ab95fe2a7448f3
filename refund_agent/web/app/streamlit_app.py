"""The refund agent as a support helpdesk: inbox, ticket timeline, approval queue, audit log.

    refund-agent web [--server.port 8600 ...]     from any folder, once installed
    streamlit run app.py                          in a checkout (app.py runs this file)

Without XAI_API_KEY the page runs on the offline stand-in model, slowed to about a second per
request so the streaming is visible (set REFUND_AGENT_OFFLINE_LATENCY=0 to turn that off).

The page only reads the store and calls the worker (refund_agent/web/): runs belong to the
server process's worker, so closing a tab never stops one, and every tab (and the terminal)
sees the same store.
"""

from refund_agent.web.page import main

main()
