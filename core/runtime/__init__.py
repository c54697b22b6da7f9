"""One forward pass over a KV cache, as fast as this machine allows: torch and transformers only.

The decoding algorithm (``core.lookahead``) asks for steps through :class:`~core.runtime.step.ModelStep`
and a :class:`~core.runtime.prepared.PreparedModel` (a model, and the compiled layers where they were
kept). Below that: the lean LLaMA step over a preallocated cache, transformers' own forward for
everything else, the CPU weight formats (``weights/``) and the compiled steps (``compiled/``).
Nothing here decides what to use: that is measured and chosen by ``core.autotune``.
"""
