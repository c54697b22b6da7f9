"""The ``lookahead-chat`` command line: the window by default, and the headless sub-commands."""

from app.cli.main import LOG_FORMAT, OneLineFormatter, main

__all__ = ["LOG_FORMAT", "OneLineFormatter", "main"]
