"""The model providers, as dialects of one API: the client (``client.py``: Grok or OpenAI
through the openai SDK, or the offline stand-in, loaded only when no key is set), what differs
between them (``table.py``: models, efforts, prices, error readers), the process's pace under
their rate limits (``limiter.py``, its pure decisions in ``limits.py``), what a provider says
about a stored response (``stored.py``) and ``refund-agent doctor`` (``doctor.py``)."""
