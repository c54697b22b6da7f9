"""Compare mode: plain and lookahead decoding side by side on one prompt."""

from app.compare.page import ComparePage
from app.compare.runner import ModelCall, thread_call

__all__ = ["ComparePage", "ModelCall", "thread_call"]
