"""Stop strings spanning several tokens and several decoding steps, through generate and the chat answer."""

from __future__ import annotations

import torch

from core.chat.answer import Answer
from core.chat.prompt import Message
from core.lookahead import Decoding, LookaheadConfig, lookahead_generate


def _reference(tiny_loaded, ids: list[int], n: int = 40) -> list[int]:
    decoding = Decoding(tiny_loaded.model, ids, max_new_tokens=n)
    list(decoding)
    return decoding.tokens


def test_generate_stop_strings_match_plain_generate(tiny_loaded) -> None:
    """transformers drops ``tokenizer=`` for custom_generate callables, so stop strings go in as a criterion."""
    from transformers import StoppingCriteriaList, StopStringCriteria

    tok, model = tiny_loaded.tokenizer, tiny_loaded.model
    ids = tok("def fibonacci(n): return fibonacci(n - 1) + fibonacci(n - 2)")["input_ids"]
    free = _reference(tiny_loaded, ids)
    stop = tok.decode(free[14:18])  # four tokens' worth of text
    prompt = torch.tensor([ids])
    reference = model.generate(prompt, max_new_tokens=40, do_sample=False, stop_strings=[stop], tokenizer=tok)
    criteria = StoppingCriteriaList([StopStringCriteria(tok, [stop])])
    out = model.generate(
        prompt,
        max_new_tokens=40,
        do_sample=False,
        stopping_criteria=criteria,
        custom_generate=lookahead_generate,
        lookahead=LookaheadConfig(5, 5, 5),
    )
    assert torch.equal(out, reference)
    assert out.shape[1] < prompt.shape[1] + 40


def test_answer_text_never_shows_part_of_a_stop_string(default_loaded) -> None:
    messages = [Message("user", "Write a Python function that adds two numbers.")]
    plain = Answer(default_loaded, messages, lookahead=None, max_new_tokens=48)
    full = "".join(d.text for d in plain)
    stop = full[len(full) // 2 : len(full) // 2 + 14]  # several tokens, in the middle of the answer
    assert len(stop.strip()) > 5 and full.index(stop) > 0
    for config in (None, LookaheadConfig(4, 4, 4)):
        answer = Answer(default_loaded, messages, lookahead=config, max_new_tokens=48, stop_strings=(stop,))
        shown = ""
        for delta in answer:
            shown += delta.text
            assert stop not in shown
            assert not any(shown.endswith(stop[:k]) for k in range(len(stop) // 2 + 1, len(stop)) if stop[:k].strip())
        assert answer.finish_reason == "stop"
        assert shown == full[: full.index(stop)]
