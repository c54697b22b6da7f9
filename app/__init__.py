"""Lookahead Chat desktop app (PySide6 on qasync) and its command line."""
