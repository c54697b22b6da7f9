"""Auto: measure this machine, predict each decoding setting's speed, choose, and keep what was measured.

measure (``measure``: the step cost curve) -> predict (``predict``: tokens per step over a step's
relative cost) -> choose (``chooser``: step by step, from what the steps measure) -> keep (``store``).
``prepare`` puts a loaded model in its fastest variant, weight layout and step first (``layout``,
``compile_choice``). Whether lookahead pays, and with which W, N, G, is measured where the app runs:
nothing of one machine is shipped as a default.

For a transformers user: ``lookahead=auto_lookahead(model)`` with ``core.lookahead.lookahead_generate``.
"""

from core.autotune.chooser import AutoChooser, auto_lookahead

__all__ = ["AutoChooser", "auto_lookahead"]
