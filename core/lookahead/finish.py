"""Why an answer ended: one set of names for the decoder, the answer job, the server and the window."""

from __future__ import annotations

from enum import StrEnum


class FinishReason(StrEnum):
    """How an answer ended (a ``str``: it compares, prints and serialises as its value)."""

    EOS = "eos"  # the model ended its turn
    LENGTH = "length"  # the token limit
    STOP = "stop"  # a stop string of the request
    CANCELLED = "cancelled"  # Stop, or the job cancelled
    ERROR = "error"  # the answer failed (the error says why)
