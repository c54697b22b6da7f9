"""Greedy lookahead must give exactly the tokens of plain greedy decoding (fp32)."""

from __future__ import annotations

import pytest
import torch

from core.lookahead import AnswerMemory, Decoding, LookaheadConfig, lookahead_generate
from tests.conftest import make_model, tiny_llama_config

CONFIGS = [
    LookaheadConfig(window=7, ngram=5, guesses=7),
    LookaheadConfig(window=4, ngram=3, guesses=4, pool_from_prompt=False),
    LookaheadConfig(window=1, ngram=2, guesses=1),
    LookaheadConfig(window=5, ngram=2, guesses=8),
    LookaheadConfig(window=3, ngram=6, guesses=0),
    LookaheadConfig(window=0, ngram=4, guesses=3),  # verification only
    LookaheadConfig(window=0, ngram=2, guesses=1, pool_from_prompt=False),
    LookaheadConfig(window=0, ngram=5, guesses=2, cut_to_match=True),  # candidates as long as their context
]


def _tiny(kind: str, seed: int):
    from transformers import MistralConfig, Qwen2Config

    common = dict(
        vocab_size=96,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
    )
    if kind == "llama":
        config = tiny_llama_config(96)
    elif kind == "mistral":
        config = MistralConfig(**common, sliding_window=None)
    else:
        config = Qwen2Config(**common, use_sliding_window=False)
    return make_model(config, seed=seed)


def _repetitive_prompt(seed: int, length: int = 40) -> list[int]:
    """Random tokens with a repeated stretch, so the pool has something to find."""
    g = torch.Generator().manual_seed(seed)
    head = torch.randint(3, 96, (length // 2,), generator=g).tolist()
    return head + head[: length // 2]


@pytest.mark.parametrize("kind", ["llama", "mistral", "qwen2"])
@pytest.mark.parametrize("seed", range(4))
def test_lookahead_matches_plain_greedy_on_tiny_models(kind: str, seed: int) -> None:
    model = _tiny(kind, seed)
    prompt = _repetitive_prompt(seed)
    reference = model.generate(torch.tensor([prompt]), max_new_tokens=48, do_sample=False, min_new_tokens=48)[
        0, len(prompt) :
    ].tolist()
    for config in CONFIGS:
        decoding = Decoding(model, prompt, lookahead=config, max_new_tokens=48)
        list(decoding)
        assert decoding.tokens == reference, f"{kind} seed {seed} {config.label}"


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_plain_loop_and_lookahead_agree_with_eager_and_sdpa(attn: str) -> None:
    model = make_model(tiny_llama_config(96), seed=7, attn=attn)
    prompt = _repetitive_prompt(7)
    plain = Decoding(model, prompt, max_new_tokens=40)
    look = Decoding(model, prompt, lookahead=LookaheadConfig(6, 4, 6), max_new_tokens=40)
    list(plain), list(look)
    assert plain.tokens == look.tokens
    assert len(plain.tokens) == 40


def test_lookahead_takes_fewer_steps_on_repetitive_text() -> None:
    """A model that has learned nothing still repeats itself; lookahead must exploit that."""
    model = make_model(tiny_llama_config(96), seed=3)
    prompt = _repetitive_prompt(3)
    look = Decoding(model, prompt, lookahead=LookaheadConfig(5, 4, 5), max_new_tokens=64)
    list(look)
    assert look.stats.steps < 64
    assert look.stats.tokens_per_step > 1.0
    assert max(look.stats.accepted_histogram) > 1


def test_eos_stops_and_is_emitted() -> None:
    model = make_model(tiny_llama_config(96), seed=1)
    prompt = _repetitive_prompt(1)
    free = Decoding(model, prompt, max_new_tokens=30)
    list(free)
    eos = free.tokens[10]
    cut = free.tokens.index(eos) + 1
    for config in (None, LookaheadConfig(5, 4, 5)):
        decoding = Decoding(model, prompt, lookahead=config, max_new_tokens=30, eos_token_ids=[eos])
        list(decoding)
        assert decoding.tokens == free.tokens[:cut]
        assert decoding.finish_reason == "eos"


def test_max_new_tokens_is_exact_even_when_a_step_emits_several() -> None:
    model = make_model(tiny_llama_config(96), seed=3)
    prompt = _repetitive_prompt(3)
    for n in (1, 2, 7, 13):
        decoding = Decoding(model, prompt, lookahead=LookaheadConfig(5, 5, 5), max_new_tokens=n)
        list(decoding)
        assert len(decoding.tokens) == n
        assert decoding.finish_reason == "length"


ANSWER_TOKENS = 96  # a few sentences: past where the first n-grams repeat, as long as the suite can pay for


@pytest.mark.default_model
def test_default_model_real_prompts_match_generate(default_loaded) -> None:
    from core.chat.prompt import Message, encode_messages

    tok, model = default_loaded.tokenizer, default_loaded.model
    wide, pooled = LookaheadConfig(7, 5, 7, pool_from_prompt=False), LookaheadConfig(4, 4, 4)
    cases = [  # code, chat and math text; each setting on more than one kind
        ("Write a Python function that checks whether a number is prime.", wide),
        ("What are some tips for getting better sleep?", pooled),
        ("If a train travels 60 km in 1.5 hours, what is its average speed?", wide),
        ("Write a Python function that checks whether a number is prime.", pooled),
    ]
    references: dict[str, list[int]] = {}
    for text, config in cases:
        ids = encode_messages(tok, [Message("user", text)])
        if text not in references:
            generated = model.generate(torch.tensor([ids]), max_new_tokens=ANSWER_TOKENS, do_sample=False)
            references[text] = generated[0, len(ids) :].tolist()
        reference = references[text]
        decoding = Decoding(
            model, ids, lookahead=config, max_new_tokens=ANSWER_TOKENS, eos_token_ids=[tok.eos_token_id]
        )
        list(decoding)
        assert decoding.tokens == reference, f"{text!r} {config.label}"
        assert decoding.stats.tokens_per_step > 1.2


def test_default_model_with_the_penalty_processes_only_rows_whose_choice_the_raw_scores_leave_open(
    default_loaded, monkeypatch
) -> None:
    """The chat default (greedy, repetition penalty 1.1) on real text: generate's answer token for token, while
    most choices skip the processing (their raw argmax is a token not yet in the text), and most of the rest
    are decided by the row's raw ranking (TokenPolicy.ranked_choice)."""
    from core.chat.prompt import Message, encode_messages
    from core.lookahead import SamplingConfig, TokenPolicy

    tok, model = default_loaded.tokenizer, default_loaded.model
    ids = encode_messages(tok, [Message("user", "Write a Python function that checks whether a number is prime.")])
    generated = model.generate(torch.tensor([ids]), max_new_tokens=64, do_sample=False, repetition_penalty=1.1)
    reference = generated[0, len(ids) :].tolist()
    policy = TokenPolicy(SamplingConfig(repetition_penalty=1.1).processors(), do_sample=False)
    processed: list[int] = []
    ranked: list[int | None] = []
    scores, ranked_choice = TokenPolicy.scores, TokenPolicy.ranked_choice
    monkeypatch.setattr(
        TokenPolicy, "scores", lambda self, prefix, logits: processed.append(1) or scores(self, prefix, logits)
    )
    monkeypatch.setattr(
        TokenPolicy,
        "ranked_choice",
        lambda self, values, indices, seen: ranked.append(ranked_choice(self, values, indices, seen)) or ranked[-1],
    )
    for config in (None, LookaheadConfig(0, 3, 1, cut_to_match=True)):
        processed.clear(), ranked.clear()
        decoding = Decoding(
            model, ids, lookahead=config, max_new_tokens=64, eos_token_ids=[tok.eos_token_id], policy=policy
        )
        list(decoding)
        assert decoding.tokens == reference, config
        decided = sum(choice is not None for choice in ranked)
        assert len(ranked) < len(reference) * 3 // 4 and decided > len(ranked) // 2, (config, len(ranked), decided)
        assert len(processed) == len(ranked) - decided


def test_custom_generate_entry_point_matches_generate() -> None:
    model = make_model(tiny_llama_config(96), seed=5)
    prompt = torch.tensor([_repetitive_prompt(5)])
    reference = model.generate(prompt, max_new_tokens=32, do_sample=False, min_new_tokens=32)

    class Collect:
        def __init__(self) -> None:
            self.puts: list[list[int]] = []
            self.ended = False

        def put(self, value: torch.Tensor) -> None:
            self.puts.append(value.reshape(-1).tolist())

        def end(self) -> None:
            self.ended = True

    streamer = Collect()
    out = model.generate(
        prompt,
        max_new_tokens=32,
        do_sample=False,
        min_new_tokens=32,
        custom_generate=lookahead_generate,
        lookahead=LookaheadConfig(window=7, ngram=5, guesses=7, pool_from_prompt=False),
        return_dict_in_generate=True,
        streamer=streamer,
    )
    assert torch.equal(out.sequences, reference)
    assert out.lookahead_stats.new_tokens == 32
    assert out.lookahead_stats.steps <= 32
    assert streamer.ended
    assert streamer.puts[0] == prompt[0].tolist()  # generate's own put of the prompt
    assert sum(streamer.puts[1:], []) == reference[0, prompt.shape[1] :].tolist()
    memory = AnswerMemory()  # kept by the caller across calls: each answer joins it
    for _ in range(2):
        remembered = model.generate(
            prompt,
            max_new_tokens=32,
            do_sample=False,
            min_new_tokens=32,
            custom_generate=lookahead_generate,
            memory=memory,
        )
        assert torch.equal(remembered, reference)
    assert len(memory) == 2 * 32


def test_custom_generate_honours_eos_list_and_stopping_criteria() -> None:
    from transformers import StoppingCriteria, StoppingCriteriaList

    model = make_model(tiny_llama_config(96), seed=2)
    prompt = torch.tensor([_repetitive_prompt(2)])
    free = model.generate(prompt, max_new_tokens=30, do_sample=False, min_new_tokens=30)[0, prompt.shape[1] :].tolist()
    eos_ids = [free[12], free[20]]
    reference = model.generate(prompt, max_new_tokens=30, do_sample=False, eos_token_id=eos_ids)
    out = model.generate(
        prompt, max_new_tokens=30, do_sample=False, eos_token_id=eos_ids, custom_generate=lookahead_generate
    )
    assert torch.equal(out, reference)

    class StopAfter(StoppingCriteria):
        def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor, **kwargs) -> torch.Tensor:
            return torch.tensor([input_ids.shape[1] >= prompt.shape[1] + 9])

    stopped = model.generate(
        prompt,
        max_new_tokens=30,
        do_sample=False,
        min_new_tokens=30,
        stopping_criteria=StoppingCriteriaList([StopAfter()]),
        custom_generate=lookahead_generate,
    )
    assert stopped.shape[1] == prompt.shape[1] + 9
    assert stopped[0, prompt.shape[1] :].tolist() == free[:9]


def test_repetition_penalty_greedy_matches_generate() -> None:
    model = make_model(tiny_llama_config(96), seed=4)
    prompt = torch.tensor([_repetitive_prompt(4)])
    reference = model.generate(prompt, max_new_tokens=40, do_sample=False, repetition_penalty=1.3, min_new_tokens=40)
    out = model.generate(
        prompt,
        max_new_tokens=40,
        do_sample=False,
        repetition_penalty=1.3,
        min_new_tokens=40,
        custom_generate=lookahead_generate,
        lookahead=LookaheadConfig(5, 4, 5),
    )
    assert torch.equal(out, reference)


def _sliding(kind: str, window: int, seed: int):
    from transformers import MistralConfig, Qwen2Config

    common = dict(
        vocab_size=96,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        sliding_window=window,
    )
    if kind == "mistral":  # every layer slides
        return make_model(MistralConfig(**common), seed=seed)
    return make_model(Qwen2Config(**common, use_sliding_window=True, max_window_layers=1), seed=seed)  # layer 1 only


@pytest.mark.parametrize("kind", ["mistral", "qwen2-mixed"])
@pytest.mark.parametrize("window", [6, 16])  # 6 is narrower than one lookahead step's span
@pytest.mark.parametrize("seed", range(2))
def test_lookahead_is_exact_past_a_sliding_attention_window(kind: str, window: int, seed: int) -> None:
    """The reference re-reads the whole sequence without a cache, under the model's own sliding mask.

    (transformers' ``generate`` parts from that definition with a 6-token window on Mistral; with 16 it agrees.)
    """
    model = _sliding(kind, window, seed)
    prompt = _repetitive_prompt(seed)  # 40 tokens: already past the window
    sequence = list(prompt)
    with torch.inference_mode():
        for _ in range(48):
            sequence.append(int(model(torch.tensor([sequence]), use_cache=False).logits[0, -1].argmax()))
    reference = sequence[len(prompt) :]
    plain = Decoding(model, prompt, max_new_tokens=48)
    list(plain)
    assert plain.tokens == reference
    for config in CONFIGS[:3]:
        decoding = Decoding(model, prompt, lookahead=config, max_new_tokens=48)
        list(decoding)
        assert decoding.tokens == reference, f"{kind} window {window} seed {seed} {config.label}"
