"""``model.generate(..., custom_generate=lookahead_generate, lookahead=LookaheadConfig(...) | chooser)``.

transformers prepares the generation config, logits processors and stopping criteria, then calls
this function instead of its own decoding loop. It honours max_new_tokens, EOS ids, stopping
criteria, sampling settings and a streamer (which generate does not hand to custom callables).
A step chooser picks each step's setting instead of a fixed one: ``core.autotune.auto_lookahead(model)``
is Auto's, which measures the model where it runs once and then decodes with whatever is fastest
there, plain decoding included (the caller keeps it, and it keeps learning across calls).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

import torch
from transformers.utils import ModelOutput

from core.lookahead.config import LookaheadConfig
from core.lookahead.decoder import Decoding, StepChooser
from core.lookahead.memory import AnswerMemory
from core.lookahead.sampling import TokenPolicy
from core.lookahead.stats import DecodeStats


@dataclass
class LookaheadGenerateOutput(ModelOutput):
    """Like generate's own output: ``sequences`` (prompt + new tokens), plus ``lookahead_stats``."""

    sequences: torch.LongTensor | None = None
    lookahead_stats: DecodeStats | None = None


def lookahead_generate(
    model: Any,
    input_ids: torch.LongTensor,
    logits_processor: Any = None,
    stopping_criteria: Any = None,
    generation_config: Any = None,
    lookahead: LookaheadConfig | StepChooser | None = None,
    memory: AnswerMemory | None = None,
    return_dict_in_generate: bool = False,
    **model_kwargs: Any,
) -> torch.LongTensor | LookaheadGenerateOutput:
    """Lookahead decoding as a transformers ``custom_generate`` callable (batch size 1).

    Args:
        lookahead: W, N, G and pool options (default ``LookaheadConfig()``), or a step chooser such as
            ``core.autotune.auto_lookahead(model)``: the fastest exact decoding measured on this model and device.
        memory: the model's earlier answers (an :class:`AnswerMemory` the caller keeps across calls): guesses
            come from them too, and this answer is added when it ends.
        return_dict_in_generate: return a :class:`LookaheadGenerateOutput` instead of a tensor.
    """
    if input_ids.shape[0] != 1:
        raise ValueError(f"lookahead_generate decodes one sequence at a time (got a batch of {input_ids.shape[0]}).")
    mask = model_kwargs.get("attention_mask")
    if mask is not None and not bool(mask.all()):
        raise ValueError("lookahead_generate does not take padded inputs: pass the sequence without padding.")
    if isinstance(lookahead, str):
        raise ValueError(
            f"lookahead must be a LookaheadConfig or a step chooser (got {lookahead!r}); for Auto, "
            "pass lookahead=auto_lookahead(model), from core.autotune, made once and kept."
        )
    if lookahead is None or isinstance(lookahead, LookaheadConfig):
        config, chooser = lookahead or LookaheadConfig(), None
    else:
        config, chooser = None, lookahead
    prompt_len = input_ids.shape[1]
    max_new = int(generation_config.max_length) - prompt_len
    if max_new < 1:
        raise ValueError(f"Nothing to generate: the prompt ({prompt_len} tokens) already reaches max_length.")
    eos = getattr(generation_config, "_eos_token_tensor", None)
    eos_ids = eos.reshape(-1).tolist() if eos is not None else []
    do_sample = bool(generation_config.do_sample)
    policy = None
    if do_sample or logits_processor:
        # generator None: torch's global RNG, so torch.manual_seed() makes runs repeatable, as with generate
        policy = TokenPolicy(logits_processor, do_sample, generator=None)
    streamer = _caller_streamer(model)
    decoding = Decoding(
        model,
        input_ids[0],
        lookahead=config,
        chooser=chooser,
        max_new_tokens=max_new,
        eos_token_ids=eos_ids,
        memory=memory,
        policy=policy,
    )
    sequence = torch.empty(1, prompt_len + max_new, dtype=torch.long, device=input_ids.device)
    sequence[:, :prompt_len] = input_ids
    length, stopped = prompt_len, False
    for step in decoding:
        kept: list[int] = []
        for token in step.tokens:
            sequence[0, length] = token
            length += 1
            kept.append(token)
            if stopping_criteria and bool(stopping_criteria(sequence[:, :length], None).any()):
                stopped = True
                break
        if streamer is not None and kept:
            streamer.put(torch.tensor(kept))
        if stopped:
            break
    if streamer is not None:
        streamer.end()
    if memory is not None:
        memory.add(sequence[0, prompt_len:length].tolist())
    sequences = sequence[:, :length]
    if return_dict_in_generate:
        return LookaheadGenerateOutput(sequences=sequences, lookahead_stats=decoding.stats)
    return sequences


def _caller_streamer(model: Any) -> Any:
    """The ``streamer`` given to ``model.generate``, which generate does not pass on to us.

    transformers 5.x hands a callable ``custom_generate`` only the keyword arguments its own
    ``_sample`` lacks, and ``streamer`` is not among them: there is no supported way to receive it.
    generate already put the prompt into it; we find it in generate's frame (tested in
    tests/core/lookahead/test_exactness.py).
    """
    frame = inspect.currentframe()
    try:
        while frame is not None:
            if frame.f_code.co_name == "generate" and frame.f_locals.get("self") is model:
                return frame.f_locals.get("streamer")
            frame = frame.f_back
        return None
    finally:
        del frame
