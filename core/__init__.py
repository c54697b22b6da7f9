"""Lookahead Chat engine: model loading, decoding, chat history, settings, benchmark (no Qt)."""

__version__ = "0.1.0"
