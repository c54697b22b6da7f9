"""The local OpenAI-compatible HTTP server: request checks, routes, and the model runner contract.

No Qt here: ``lookahead-chat serve`` runs it over a :class:`core.engine.model_thread.ModelThread`; the
window runs it on its qasync loop over the same thread, through its model worker.
"""
