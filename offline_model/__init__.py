"""Offline model: a local Responses API server that stands in for Grok.

Start one with :func:`start_offline_server` (or ``python -m offline_model``)
and point ``openai.OpenAI(base_url=server.base_url, api_key="offline")`` at it.
"""

from .server import OfflineServer, start_offline_server

__all__ = ["OfflineServer", "start_offline_server"]
