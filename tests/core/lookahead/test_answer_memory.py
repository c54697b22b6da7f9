"""The memory of a model's earlier answers: what followed the text's last tokens in another answer."""

from __future__ import annotations

import pytest

from core.chat.prompt import Message, encode_messages
from core.lookahead import AnswerMemory, Decoding, LookaheadConfig
from tests.conftest import make_model, tiny_llama_config


def test_the_longest_context_of_three_or_more_tokens_is_recalled() -> None:
    memory = AnswerMemory()
    memory.add([1, 2, 3, 4, 5, 6])
    memory.add([9, 2, 3, 4, 7, 8])
    assert memory.continuation([0, 2, 3, 4], 2) == (3, (7, 8))  # the latest answer's
    assert memory.continuation([1, 2, 3, 4], 3) == (4, (5, 6))  # the longer context wins
    assert memory.continuation([5, 3, 4], 3) == (0, ())  # two tokens of context are too weak a guess
    assert memory.continuation([5, 3, 4], 3, shortest=1) == (2, (7, 8))  # unless asked for any context


def test_a_guess_stops_where_its_answer_ended() -> None:
    memory = AnswerMemory()
    memory.add([1, 2, 3, 4, 5])
    memory.add([6, 7, 8])
    assert memory.continuation([2, 3, 4], 4) == (3, (5,))  # not on into the next answer
    assert memory.continuation([3, 4, 5], 4) == (0, ())  # nothing followed the end
    assert memory.continuation([5, 6, 7], 2) == (0, ())  # no context runs across two answers


def test_the_oldest_answers_go_when_it_is_full() -> None:
    memory = AnswerMemory(max_tokens=10)
    memory.add([1, 2, 3, 4])
    memory.add([5, 6, 7, 8])
    assert memory.continuation([1, 2, 3], 1) == (3, (4,))
    memory.add([9, 10, 11, 12])
    assert len(memory) <= 10
    assert memory.continuation([1, 2, 3], 1) == (0, ())
    assert memory.continuation([9, 10, 11], 1) == (3, (12,))
    memory.add(list(range(20, 30)))  # an answer as long as the memory keeps only itself
    assert len(memory) == 10 and memory.continuation([25, 26, 27], 2) == (3, (28, 29))
    with pytest.raises(ValueError, match="at least one token"):
        AnswerMemory(max_tokens=0)


def test_guesses_come_from_the_memory_where_its_context_is_longer() -> None:
    model = make_model(tiny_llama_config(96), seed=0)
    memory = AnswerMemory()
    memory.add([30, 31, 7, 8, 9, 70, 71, 72])
    prompt = [7, 8, 9, 40, 41, 42, 5, 8, 9]  # the text itself matches only "8 9"
    decoding = Decoding(model, prompt, lookahead=LookaheadConfig(0, 4, 2), max_new_tokens=1, memory=memory)
    assert decoding._candidates(9, 4, 2, cut=True) == [(40, 41)]  # "8 9" in the text: two tokens of context
    decoding._context.extend([31, 7, 8, 9])
    assert decoding._candidates(9, 4, 2, cut=True)[0] == (70, 71, 72)  # "31 7 8 9" in an earlier answer
    assert decoding._candidates(9, 3, 2, cut=False)[0] == (70, 71)
    decoding._context.extend([0, 7, 8, 9])
    assert decoding._candidates(9, 4, 2, cut=True)[0] == (0, 7, 8)  # "7 8 9": as long in the text itself


def test_where_the_text_offers_no_guess_the_memory_guesses_one_token_on_any_context() -> None:
    model = make_model(tiny_llama_config(96), seed=0)
    memory = AnswerMemory()
    memory.add([30, 8, 9, 70, 71, 72])
    prompt = [7, 8, 40, 41, 5, 6]  # 9 never occurred in the text
    decoding = Decoding(model, prompt, lookahead=LookaheadConfig(0, 4, 2), max_new_tokens=1, memory=memory)
    decoding._context.extend([8, 9])
    assert decoding._candidates(9, 4, 2, cut=False) == [(70,)]  # "8 9" in an earlier answer: one token
    decoding._context.extend([40, 41])
    assert decoding._candidates(41, 4, 2, cut=False) == [(5, 6, 8)]  # the text's own guess: the memory stays out


def test_an_answer_the_memory_holds_takes_far_fewer_steps_and_stays_exact(default_loaded) -> None:
    """Asked again, the model whose memory holds its earlier answer verifies it a few tokens a step; the output is
    still exactly plain greedy's (a wrong recall would show as more steps, never as other tokens)."""
    ids = encode_messages(default_loaded.tokenizer, [Message("user", "Write a short poem about the sea.")])
    eos = default_loaded.eos_token_ids
    plain = Decoding(default_loaded.model, ids, max_new_tokens=48, eos_token_ids=eos)
    list(plain)
    config = LookaheadConfig(0, 4, 1, cut_to_match=True)
    without = Decoding(default_loaded.model, ids, lookahead=config, max_new_tokens=48, eos_token_ids=eos)
    list(without)
    memory = AnswerMemory()
    memory.add(plain.tokens)
    recalled = Decoding(
        default_loaded.model, ids, lookahead=config, max_new_tokens=48, eos_token_ids=eos, memory=memory
    )
    list(recalled)
    assert without.tokens == recalled.tokens == plain.tokens
    assert len(set(plain.tokens)) > 20  # real text, not a loop the answer's own context would guess as well
    assert recalled.stats.steps < 24 < without.stats.steps, (recalled.stats.steps, without.stats.steps)
    assert len(memory) == len(plain.tokens)  # a decoding only reads it
