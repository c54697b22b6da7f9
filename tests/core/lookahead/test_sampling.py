"""Lookahead sampling keeps plain sampling's output distribution, and is reproducible with a seed."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from transformers import (
    LogitsProcessorList,
    NoRepeatNGramLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

import core.lookahead.sampling as sampling
from core.lookahead import Decoding, LookaheadConfig, SamplingConfig, TokenPolicy, lookahead_generate
from core.runtime.step import ranked
from tests.conftest import make_model, tiny_llama_config

VOCAB = 12
SAMPLES = 1250
SIGNIFICANCE = 1e-3
SETTINGS = SamplingConfig(temperature=1.3, top_k=9, top_p=0.97)
PROMPT = [3, 4, 5, 6, 3, 4, 5, 7, 3, 4, 5, 6, 3, 4, 5, 7, 3, 4]


@pytest.fixture(scope="module")
def model():
    return make_model(tiny_llama_config(VOCAB, hidden_size=32, intermediate_size=64, num_attention_heads=2), seed=11)


def _pairs(model, lookahead: LookaheadConfig | None, seed_offset: int) -> Counter[tuple[int, int]]:
    """Distribution of the 2nd and 3rd generated tokens (the 1st comes from the prefill in both modes)."""
    counts: Counter[tuple[int, int]] = Counter()
    for i in range(SAMPLES):
        policy = TokenPolicy.from_config(SamplingConfig(**{**SETTINGS.__dict__, "seed": seed_offset + i}), model.device)
        decoding = Decoding(model, PROMPT, lookahead=lookahead, max_new_tokens=3, policy=policy)
        list(decoding)
        counts[(decoding.tokens[1], decoding.tokens[2])] += 1
    return counts


@pytest.fixture(scope="module")
def exact_pairs(model) -> dict[tuple[int, int], float]:
    """The pair's probabilities under plain sampling, from the model's logits and transformers' own warpers:
    P(t1, t2) = sum over t0 of q(t0) q(t1 | t0) q(t2 | t0, t1)."""
    warpers = LogitsProcessorList(
        [
            TemperatureLogitsWarper(SETTINGS.temperature),
            TopKLogitsWarper(SETTINGS.top_k),
            TopPLogitsWarper(SETTINGS.top_p),
        ]
    )

    def next_probabilities(prefixes: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            logits = model(prefixes).logits[:, -1, :].float()
        return warpers(prefixes, logits).softmax(-1)

    prompt = torch.tensor([PROMPT])
    first = next_probabilities(prompt)[0]
    after_first = torch.cat([prompt.repeat(VOCAB, 1), torch.arange(VOCAB)[:, None]], 1)
    second = next_probabilities(after_first)  # [t0, t1]
    after_second = torch.cat([after_first.repeat_interleave(VOCAB, 0), torch.arange(VOCAB).repeat(VOCAB)[:, None]], 1)
    third = next_probabilities(after_second).view(VOCAB, VOCAB, VOCAB)  # [t0, t1, t2]
    pairs = torch.einsum("a,ab,abc->bc", first.double(), second.double(), third.double())
    return {(b, c): float(pairs[b, c]) for b in range(VOCAB) for c in range(VOCAB) if pairs[b, c] > 0}


def chi_square_p_value(counts: Counter, probabilities: dict[tuple[int, int], float]) -> float:
    """Chi-square goodness of fit of ``counts`` to ``probabilities``; cells expecting fewer than 10 are pooled.
    A count where the probability is zero fails at once."""
    n = sum(counts.values())
    impossible = set(counts) - set(probabilities)
    assert not impossible, f"sampled pairs that plain sampling never gives: {sorted(impossible)}"
    cells, pooled = [], [0, 0.0]
    for key, p in probabilities.items():
        if n * p < 10:
            pooled[0] += counts[key]
            pooled[1] += n * p
        else:
            cells.append((counts[key], n * p))
    if pooled[1]:
        cells.append(tuple(pooled))
    stat = sum((observed - expected) ** 2 / expected for observed, expected in cells)
    dof = len(cells) - 1
    return float(
        torch.special.gammaincc(torch.tensor(dof / 2, dtype=torch.float64), torch.tensor(stat / 2, dtype=torch.float64))
    )


def test_plain_sampling_follows_the_warped_distribution(model, exact_pairs) -> None:
    p = chi_square_p_value(_pairs(model, None, 0), exact_pairs)
    assert p > SIGNIFICANCE, f"plain sampling is off its distribution (p={p:.2e})"


def test_lookahead_sampling_matches_plain_sampling(model, exact_pairs) -> None:
    p = chi_square_p_value(_pairs(model, LookaheadConfig(3, 4, 6), 10**6), exact_pairs)
    assert p > SIGNIFICANCE, f"distributions differ (p={p:.2e})"


def test_the_statistical_test_catches_a_wrong_acceptance_rule(model, exact_pairs, monkeypatch) -> None:
    """Accepting a draft with probability min(1, 2 p) instead of p biases the output: the test must see it."""
    monkeypatch.setattr(sampling, "accept_draft", lambda p_token, u: u < min(1.0, 2 * p_token))
    wrong = _pairs(model, LookaheadConfig(3, 4, 6), 10**6)
    assert chi_square_p_value(wrong, exact_pairs) < SIGNIFICANCE


def test_lookahead_sampling_accepts_several_tokens_per_step(model) -> None:
    policy = TokenPolicy.from_config(SamplingConfig(temperature=0.7, seed=1), model.device)
    decoding = Decoding(model, PROMPT * 3, lookahead=LookaheadConfig(3, 4, 6), max_new_tokens=60, policy=policy)
    list(decoding)
    assert decoding.stats.steps < 60


def test_seeded_sampling_is_reproducible(model) -> None:
    def run(mode: LookaheadConfig | None) -> list[int]:
        policy = TokenPolicy.from_config(SamplingConfig(temperature=1.0, top_p=0.9, seed=42), model.device)
        decoding = Decoding(model, PROMPT, lookahead=mode, max_new_tokens=40, policy=policy)
        list(decoding)
        return decoding.tokens

    for mode in (None, LookaheadConfig(4, 4, 4)):
        assert run(mode) == run(mode)


def test_generate_with_do_sample_uses_lookahead_sampling(model) -> None:
    prompt = torch.tensor([PROMPT])

    def sample(seed: int):
        torch.manual_seed(seed)
        return model.generate(
            prompt,
            do_sample=True,
            temperature=0.8,
            top_k=5,
            max_new_tokens=20,
            min_new_tokens=20,
            custom_generate=lookahead_generate,
            lookahead=LookaheadConfig(3, 4, 4),
            return_dict_in_generate=True,
        )

    out = sample(0)
    assert out.sequences.shape == (1, len(PROMPT) + 20)
    assert out.lookahead_stats.new_tokens == 20
    assert out.sequences[0, len(PROMPT) :].max() < VOCAB
    assert torch.equal(sample(0).sequences, out.sequences)  # torch.manual_seed governs it, as it does generate


@pytest.mark.parametrize("temperature", [0.0, 1e-156, -1.0, float("nan")])
def test_sampling_refuses_a_temperature_it_cannot_divide_by(temperature: float) -> None:
    with pytest.raises(ValueError, match="at least"):
        SamplingConfig(temperature=temperature)


def test_the_repetition_penalty_gives_transformers_numbers_bit_for_bit() -> None:
    from transformers.generation.logits_process import RepetitionPenaltyLogitsProcessor

    generator = torch.Generator().manual_seed(0)
    scores = torch.randn(1, 500, generator=generator) * 4
    repeated = torch.randint(0, 500, (1, 300), generator=generator)  # with repeats: each id penalised once
    beyond = torch.cat([repeated, torch.tensor([[500, 731]])], dim=1)  # ids past the head's vocabulary
    for penalty in (1.1, 0.8):
        for ids in (repeated, beyond, repeated[:, :0]):
            ours = sampling.RepetitionPenalty(penalty)(ids, scores.clone())
            theirs = RepetitionPenaltyLogitsProcessor(penalty)(ids, scores.clone())
            assert torch.equal(ours, theirs)
    assert not torch.equal(sampling.RepetitionPenalty(1.1)(repeated, scores.clone()), scores)


def test_greedy_decoding_with_the_penalty_matches_generate(model) -> None:
    prompt = torch.tensor([PROMPT])
    reference = model.generate(prompt, max_new_tokens=24, min_new_tokens=24, do_sample=False, repetition_penalty=1.2)
    policy = TokenPolicy(SamplingConfig(repetition_penalty=1.2).processors(), do_sample=False)
    for lookahead in (None, LookaheadConfig(0, 3, 2), LookaheadConfig(3, 3, 3)):
        decoding = Decoding(model, PROMPT, lookahead=lookahead, max_new_tokens=24, policy=policy)
        list(decoding)
        assert decoding.tokens == reference[0, len(PROMPT) :].tolist()


def test_a_processor_that_reads_the_answer_so_far_sees_every_token_of_it(model) -> None:
    """Processors read the text's ids, which the decoder writes only when a row is processed: a rule over the
    answer's own bigrams gives generate's answer, plain and lookahead."""
    prompt = torch.tensor([PROMPT])
    reference = model.generate(prompt, max_new_tokens=24, do_sample=False, no_repeat_ngram_size=2, eos_token_id=None)
    policy = TokenPolicy(LogitsProcessorList([NoRepeatNGramLogitsProcessor(2)]), do_sample=False)
    for lookahead in (None, LookaheadConfig(0, 3, 2), LookaheadConfig(3, 3, 3)):
        decoding = Decoding(model, PROMPT, lookahead=lookahead, max_new_tokens=24, policy=policy)
        list(decoding)
        assert decoding.tokens == reference[0, len(PROMPT) :].tolist()


def unseen_argmax_holds(penalty: float, trials: int = 300) -> tuple[int, int]:
    """(rows whose raw argmax is not in the text, of those the rows where it is the processed argmax too), on
    small-integer logits (many ties, zeros, now and then a NaN)."""
    generator = torch.Generator().manual_seed(1)
    policy = TokenPolicy(SamplingConfig(repetition_penalty=penalty).processors(), do_sample=False)
    unseen = held = 0
    for trial in range(trials):
        logits = torch.randint(-3, 4, (50,), generator=generator).float()
        if trial % 10 == 0:
            logits[int(torch.randint(0, 50, (1,), generator=generator))] = float("nan")
        prefix = torch.randint(0, 50, (1, 20), generator=generator)
        raw = int(logits.max(-1).indices)
        if raw not in prefix[0].tolist():
            unseen += 1
            held += policy.choose(prefix, logits) == raw
    return unseen, held


def test_a_penaltys_greedy_choice_is_the_raw_one_where_that_token_is_not_in_the_text() -> None:
    """What lets decoding skip processing a row: a repetition penalty of at least 1, alone and greedy, only
    lowers the scores of tokens in the text, so a raw argmax outside the text is the processed one too."""
    assert TokenPolicy(SamplingConfig(repetition_penalty=1.1).processors(), do_sample=False).keeps_unseen_argmax
    unseen, held = unseen_argmax_holds(1.1)
    assert unseen > 100 and held == unseen
    unseen, held = unseen_argmax_holds(0.8)  # below 1 the penalty raises them: the rule would not hold
    assert held < unseen
    for config, do_sample in (
        (SamplingConfig(repetition_penalty=0.8), False),
        (SamplingConfig(repetition_penalty=1.1), True),
        (SamplingConfig(repetition_penalty=1.1, top_k=5), False),
    ):
        assert not TokenPolicy(config.processors(), do_sample=do_sample).keeps_unseen_argmax


@pytest.mark.parametrize("kind", ["integers", "floats", "close"])
def test_a_penaltys_greedy_choice_from_the_raw_ranking_is_the_processed_one(kind: str) -> None:
    """Where the raw argmax is in the text, the row's highest raw scores mostly decide the processed choice:
    whatever ranked_choice answers is what processing the row chooses, on integer logits (ties, zeros, NaNs
    now and then), on floats, and on rows made close (the penalised top a hair from the first free one)."""
    generator = torch.Generator().manual_seed(len(kind))
    penalty = 1.1
    policy = TokenPolicy(SamplingConfig(repetition_penalty=penalty).processors(), do_sample=False)
    decided = undecided = 0
    for trial in range(400):
        if kind == "integers":
            logits = torch.randint(-30, 31, (60,), generator=generator).float()
            if trial % 10 == 0:
                logits[int(torch.randint(0, 60, (1,), generator=generator))] = float("nan")
        else:
            logits = torch.randn(60, generator=generator) * 4
        prefix = torch.randint(0, 60, (1, 30), generator=generator)
        seen = set(prefix[0].tolist())
        raw = int(logits.argmax())
        token = next(t for t in range(60) if t in seen)
        if kind == "close":  # the raw argmax a token of the text, penalised a hair from the first free one
            free = next(t for t in range(60) if t not in seen)
            top = float(logits.abs().max()) + 1
            logits[token] = top
            logits[free] = top / penalty * (1 + float(torch.randint(-2, 3, (1,), generator=generator)) * 1e-6)
        elif raw not in seen:  # the raw argmax a token of the text, 0 to 2 above the rest
            logits[token] = float(logits.max()) + float(torch.randint(0, 3, (1,), generator=generator))
        choice = policy.ranked_choice(*ranked(logits), seen)
        if choice is None:
            undecided += 1
        else:
            decided += 1
            assert choice == policy.choose(prefix, logits), (trial, logits.tolist(), seen)
    assert undecided > 300 if kind == "close" else decided > {"integers": 100, "floats": 250}[kind], (
        decided,
        undecided,
    )


def test_a_processor_that_needs_more_arguments_goes_through_transformers_list() -> None:
    class NeedsCurrentLength:
        def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor, cur_len: int) -> torch.Tensor:
            return scores

    from transformers.generation.logits_process import LogitsProcessorList

    policy = TokenPolicy(LogitsProcessorList([NeedsCurrentLength()]), do_sample=False)
    with pytest.raises(ValueError, match="required parameters"):  # transformers' list asks for them by name
        policy.scores(torch.tensor([PROMPT]), torch.zeros(VOCAB))
