"""The decoder's own behaviour: the Jacobi branch alone, switching settings mid-answer, a step's mask,
and clear errors for what it cannot do."""

from __future__ import annotations

import pytest
import torch

from core.chat.prompt import Message, encode_messages
from core.lookahead import Decoding, LookaheadConfig
from tests.conftest import make_model, tiny_llama_config


def test_jacobi_branch_alone_gives_more_than_one_token_per_step(default_loaded) -> None:
    """With the prompt and answer pools off, every candidate comes from the Jacobi window: a broken
    lookahead mask or window shift leaves exactness intact but drops this to about 1."""
    ids = encode_messages(default_loaded.tokenizer, [Message("user", "Count from 1 to 40, separated by commas.")])
    config = LookaheadConfig(5, 4, 5, pool_from_prompt=False, pool_from_output=False)
    look = Decoding(
        default_loaded.model, ids, lookahead=config, max_new_tokens=48, eos_token_ids=default_loaded.eos_token_ids
    )
    plain = Decoding(default_loaded.model, ids, max_new_tokens=48, eos_token_ids=default_loaded.eos_token_ids)
    list(look), list(plain)
    assert look.tokens == plain.tokens
    assert look.stats.tokens_per_step > 1.8, look.stats.accepted_histogram


class Alternating:
    """A step chooser that cycles through settings: switching every step must keep the output exact."""

    def __init__(self, settings: list[LookaheadConfig | None]) -> None:
        self.settings = settings
        self.seen: list[tuple[str, int, int]] = []
        self._i = -1

    def choose(self) -> LookaheadConfig | None:
        self._i += 1
        return self.settings[self._i % len(self.settings)]

    def observe(self, setting: LookaheadConfig | None, tokens: int, seconds: float, fed: int) -> None:
        self.seen.append((setting.label if setting else "plain", tokens, fed))

    shadow_settings: tuple[LookaheadConfig, ...] = ()  # nothing scored beside the steps

    def observe_shadows(self, scores: list[tuple[LookaheadConfig, int, int]]) -> None:
        raise AssertionError("no shadow settings, so nothing to score")


@pytest.mark.parametrize("seed", range(3))
def test_switching_settings_every_step_keeps_greedy_output_exact(seed: int) -> None:
    model = make_model(tiny_llama_config(96), seed=seed)
    g = torch.Generator().manual_seed(seed)
    head = torch.randint(3, 96, (16,), generator=g).tolist()
    prompt = head + head
    reference = model.generate(torch.tensor([prompt]), max_new_tokens=40, do_sample=False, min_new_tokens=40)[
        0, len(prompt) :
    ].tolist()
    chooser = Alternating(
        [LookaheadConfig(3, 4, 3), None, LookaheadConfig(0, 5, 3), LookaheadConfig(5, 3, 5), LookaheadConfig(0, 2, 1)]
    )
    decoding = Decoding(model, prompt, chooser=chooser, max_new_tokens=40)
    list(decoding)
    assert decoding.tokens == reference
    assert {label for label, _, _ in chooser.seen} == {"W3 N4 G3", "plain", "W0 N5 G3", "W5 N3 G5", "W0 N2 G1"}
    assert all(fed == 1 for label, _, fed in chooser.seen if label == "plain")
    assert sum(decoding.stats.setting_tokens.values()) == len(decoding.tokens) - 1  # all but the prefill's token
    assert decoding.stats.mode == "auto"


def test_a_steps_mask_covers_its_own_tokens_and_is_its_shapes(monkeypatch) -> None:
    """A lookahead step's mask is ``[q, q]`` among its tokens (every cached entry is seen) and belongs to the
    step's shape, made once: steps of one shape pass the same tensor, and nothing writes into it."""
    from core.runtime.lean_step import LlamaStep

    model = make_model(tiny_llama_config(96), seed=3)
    passed: list[tuple[int, torch.Tensor, torch.Tensor]] = []  # tokens fed, the mask, its values then
    forward = LlamaStep.forward

    def record(self, ids, positions, keep, mask=None):
        if mask is not None:
            passed.append((len(ids), mask, mask.clone()))
        return forward(self, ids, positions, keep, mask)

    monkeypatch.setattr(LlamaStep, "forward", record)
    decoding = Decoding(model, list(range(3, 40)), lookahead=LookaheadConfig(4, 4, 4), max_new_tokens=30)
    list(decoding)
    assert decoding.stats.steps > 5 and len(passed) == decoding.stats.steps - 1  # every step after the prompt
    assert all(mask.shape == (fed, fed) and torch.equal(mask, then) for fed, mask, then in passed)
    assert len({id(mask) for _, mask, _ in passed}) < len(passed)


def test_a_batch_of_several_sequences_is_refused_clearly() -> None:
    model = make_model(tiny_llama_config(96), seed=0)
    with pytest.raises(ValueError, match="one sequence at a time"):
        Decoding(model, torch.ones(2, 5, dtype=torch.long), lookahead=LookaheadConfig(2, 3, 2))


def test_flash_attention_is_refused_with_what_to_do() -> None:
    model = make_model(tiny_llama_config(96), seed=0)
    model.config._attn_implementation = "flash_attention_2"
    with pytest.raises(ValueError, match="sdpa"):
        Decoding(model, [3, 4, 5], lookahead=LookaheadConfig(2, 3, 2))
    Decoding(model, [3, 4, 5])  # plain decoding passes no mask of its own: allowed


def test_verification_only_needs_a_guess() -> None:
    with pytest.raises(ValueError, match="Verification only"):
        LookaheadConfig(0, 4, 0)
    assert LookaheadConfig(0, 4, 2).max_step_tokens == 7


@pytest.mark.parametrize("setting", [LookaheadConfig(7, 5, 7), LookaheadConfig(0, 3, 1, cut_to_match=True)])
def test_a_setting_is_found_again_from_its_label(setting: LookaheadConfig) -> None:
    assert LookaheadConfig.from_label(setting.label) == setting
    with pytest.raises(ValueError, match="not a lookahead setting"):
        LookaheadConfig.from_label(setting.label + " x")


def test_guesses_come_first_from_the_longest_earlier_context_then_from_the_pool() -> None:
    """After ... 7 8 9 the tokens that followed 7 8 9 before are the first guess, not the pool's newest
    n-gram under 9; cut to the context's length when asked, the pool's own guesses to one token."""
    model = make_model(tiny_llama_config(96), seed=0)
    prompt = [7, 8, 9, 40, 41, 42, 5, 9, 50, 51, 52, 6, 8, 9, 60, 61, 7, 8, 9]
    decoding = Decoding(model, prompt, lookahead=LookaheadConfig(0, 4, 3), max_new_tokens=1)  # prompt indexed
    assert decoding._candidates(9, 4, 3, cut=False) == [(40, 41, 42), (60, 61, 7), (50, 51, 52)]
    assert decoding._candidates(9, 4, 3, cut=True) == [(40, 41, 42), (60,), (50,)]  # (40,) adds nothing
    assert decoding._candidates(9, 4, 1, cut=True) == [(40, 41, 42)]


class Scoring(Alternating):
    """Runs verification-only settings and also scores them in the shadow, as Auto does."""

    def __init__(self, settings: list[LookaheadConfig | None]) -> None:
        super().__init__(settings)
        self.shadow_settings = [s for s in settings if s is not None]
        self.scored: dict[str, list[tuple[int, int]]] = {s.label: [] for s in self.shadow_settings}

    def observe_shadows(self, scores: list[tuple[LookaheadConfig, int, int]]) -> None:
        for setting, tokens, fed in scores:
            self.scored[setting.label].append((tokens, fed))


@pytest.mark.parametrize("cut", [False, True])
@pytest.mark.parametrize("seed", range(3))
def test_shadow_scores_equal_what_the_setting_does_when_it_runs(seed: int, cut: bool) -> None:
    """Scoring a verification-only setting from the answer gives exactly its real tokens and fed
    tokens per step: Auto can pick among them without running each."""
    model = make_model(tiny_llama_config(96), seed=seed)
    prompt = list(range(10, 30)) * 2
    setting = LookaheadConfig(0, 4, 2, cut_to_match=cut)
    chooser = Scoring([setting])
    decoding = Decoding(model, prompt, chooser=chooser, max_new_tokens=60)
    list(decoding)
    real = [(tokens, fed) for _, tokens, fed in chooser.seen]
    assert len(chooser.scored[setting.label]) == len(real)
    # the last steps may be cut by max_new_tokens; every complete one must agree exactly
    assert chooser.scored[setting.label][:-4] == real[:-4]
    assert sum(t for t, _ in real) > len(real)  # the comparison is not vacuous: candidates were accepted
