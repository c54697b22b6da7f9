"""The local OpenAI-compatible HTTP server: request checks, routes, and the model runner contract.

No Qt here: ``lookahead-chat serve`` runs it with :class:`core.server.runner.ThreadRunner`, the
window runs it on its qasync loop through its own model worker (``app/server_control.py``).
"""
