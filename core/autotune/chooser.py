"""Auto's chooser: the fastest exact decoding on this machine, chosen and revised step by step.

Settings predicted to lose are never run; :class:`AutoChooser` starts with the best prediction
(plain decoding when nothing beats it by a margin), measures every step it runs, probes the
runner-up now and then, and switches when the measured rates say so. Every setting is exact, so
switching never changes the output.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from core.autotune.calibration import Calibration, calibrate
from core.autotune.predict import KEEP_RATIO, PRIOR_STEPS
from core.lookahead.config import LookaheadConfig


@dataclass
class _Arm:
    setting: LookaheadConfig | None
    tokens_per_step: float
    fed_tokens: float
    seconds: float  # per step
    observed: int = 0
    streak: int = 0  # steps run in a row, up to now
    last_step: int = 0  # the chooser's step count when it last ran


@dataclass
class _Shadow:
    """A verification-only setting scored from the answer on every step, run or not.

    Over every step: what :meth:`AutoChooser.learned` stores for the next start's predictions. Over the
    steps that had candidates to verify (where running it differs from a plain step at all): what the
    verification arm expects when it runs this setting.
    """

    setting: LookaheadConfig
    tokens_per_step: float
    fed_tokens: float
    verified_tokens: float
    verified_fed: float
    # over about STEADY_STEPS verifying steps, which decides which setting verifies (the running arm's figures,
    # above, follow the text faster): tokens, and each step's cost over a plain step's averaged (not the cost of
    # the average tokens fed, which on a convex curve favours settings whose steps vary more in size)
    steady_cost: float
    observed: int = 0
    verified: int = 0
    steady_tokens: float = field(init=False)

    def __post_init__(self) -> None:
        self.steady_tokens = self.verified_tokens


PROBE_STEPS = 3
"""Steps a probe of a lookahead setting measures (a plain probe measures one)."""

STEADY_STEPS = 100
"""Verifying steps over which the verification settings are compared: which one verifies changes only when
another has led over about this many (the tokens a step accepted swing with every few lines of text, and a
choice that followed them chases noise, feeding more tokens than any one setting held fixed)."""

COST_STEPS = 50
"""Steps of one size over which what such a step costs relative to a plain step is learned (see
:meth:`AutoChooser._relative`)."""

LEARNED_FROM = 8
"""Steps of a size measured before their learned cost replaces the calibration's."""

REPROBE_AFTER = 512
"""Steps after which a setting that measured slower is probed again anyway (every arm was predicted
at least KEEP_RATIO of plain, so such a probe costs little)."""


class AutoChooser:
    """Chooses each step's setting from measured rates; keeps learning across the answers it serves.

    Rates are tokens per second per setting: exponential moving averages of what the steps did,
    started from the calibration's predictions. Verification-only settings are also scored on every
    step from the answer itself (``observe_shadows``): the verification arm runs the best of them
    without probing each, and takes its tokens per verifying step from those scores (exact, and from
    every step, run or not), so only its step time comes from the steps it runs; its setting changes
    when another's rate over about :data:`STEADY_STEPS` verifying steps leads by ``verify_margin`` (a
    small one: those are counts, not timings, and changing between them costs nothing). The chooser runs
    the best rate; every
    ``probe_every`` steps it runs another setting whose rate might beat it for a few steps, and
    the best must lead by ``switch_margin`` before the running setting is changed; a setting that
    fell behind gets another probe after :data:`REPROBE_AFTER` steps. A windowed
    setting that resumes has a stale Jacobi window for its first N-1 steps: they count for its
    step time, not for its tokens per step, and its probes last that much longer.
    """

    def __init__(
        self,
        calibration: Calibration,
        *,
        probe_every: int = 32,
        switch_margin: float = 1.04,
        verify_margin: float = 1.01,
        smoothing: float = 0.15,
    ) -> None:
        self.calibration = calibration
        self.probe_every = probe_every
        self.switch_margin = switch_margin
        self.verify_margin = verify_margin
        self.smoothing = smoothing
        unit = calibration.curve.seconds[0]
        predicted = {e.label: e for e in calibration.estimates}
        self._arms: list[_Arm] = []
        for setting in calibration.arms():
            e = predicted.get(setting.label) if setting is not None else None
            tps, fed = (e.tokens_per_step, e.fed_tokens) if e else (1.0, 1.0)
            self._arms.append(_Arm(setting, tps, fed, unit * calibration.curve.relative(fed)))
        self._current = self._arms[0]
        self._plain = next(a for a in self._arms if a.setting is None)
        self._last: _Arm | None = None
        self._probe: _Arm | None = None
        self._probe_left = 0
        self._steps = 0
        # Verification-only settings are scored on every step, run or not (shadow_settings): which
        # of them runs as the verification arm follows those scores.
        self._verify = next((a for a in self._arms if a.setting is not None and a.setting.window == 0), None)
        self._verify_extra = 0.0  # seconds a verification step measured beyond the curve's cost (_cost_verification)
        self._learned_cost: dict[int, tuple[float, int]] = {}  # tokens fed -> (cost over a plain step, steps measured)
        self._shadows: dict[LookaheadConfig, _Shadow] = {}
        if self._verify is not None:
            for e in calibration.estimates:
                if e.setting is not None and e.setting.window == 0 and e.speedup >= KEEP_RATIO:
                    tokens, fed = e.tokens_per_step, e.fed_tokens
                    self._shadows[e.setting] = _Shadow(
                        e.setting, tokens, fed, tokens, fed, calibration.curve.relative(fed)
                    )

    @property
    def settings(self) -> list[LookaheadConfig | None]:
        """Every setting it may run, and those it scores (the n-gram pool must serve them all)."""
        running = [arm.setting for arm in self._arms]
        return [*running, *(s for s in self._shadows if s not in running)]

    @property
    def shadow_settings(self) -> list[LookaheadConfig]:
        """Verification-only settings to score after every step, from what the step's answer turned out to be."""
        return list(self._shadows)

    def observe_shadows(self, scores: Sequence[tuple[LookaheadConfig, int, int]]) -> None:
        """What scored settings would have emitted (``tokens``) and fed at steps, as ``(setting, tokens, fed)``
        in step order: greedy verification is known exactly once the following tokens are. A step that fed
        one token had nothing to verify (the decoder runs a plain step then). Picks the verification arm's
        setting and, from every step, its tokens per verifying step."""
        costs: dict[int, float] = {}
        for setting, tokens, fed in scores:
            shadow = self._shadows[setting]
            weight = max(self.smoothing / 2, 1.0 / (shadow.observed + PRIOR_STEPS))
            shadow.tokens_per_step += weight * (tokens - shadow.tokens_per_step)
            shadow.fed_tokens += weight * (fed - shadow.fed_tokens)
            shadow.observed += 1
            if fed > 1:
                weight = max(self.smoothing / 2, 1.0 / (shadow.verified + PRIOR_STEPS))
                shadow.verified_tokens += weight * (tokens - shadow.verified_tokens)
                shadow.verified_fed += weight * (fed - shadow.verified_fed)
                weight = max(1.0 / STEADY_STEPS, 1.0 / (shadow.verified + PRIOR_STEPS))
                if fed not in costs:
                    costs[fed] = self._relative(fed)
                shadow.steady_tokens += weight * (tokens - shadow.steady_tokens)
                shadow.steady_cost += weight * (costs[fed] - shadow.steady_cost)
                shadow.verified += 1
        arm = self._verify
        assert arm is not None
        best = max(self._shadows.values(), key=_steady_rate)
        running = self._shadows.get(arm.setting)
        if best is not running and (running is None or _steady_rate(best) > self.verify_margin * _steady_rate(running)):
            arm.setting, running = best.setting, best
        if running is not None:
            arm.tokens_per_step, arm.fed_tokens = running.verified_tokens, running.verified_fed
        self._cost_verification()
        self._switch_to_best()

    def rates(self) -> dict[str, float]:
        """Estimated tokens per second of every setting, as now believed."""
        return {_label(a.setting): self._rate(a) for a in self._arms}

    def learned(self, min_steps: int = 24) -> dict[str, tuple[float, float]]:
        """Tokens per step and tokens fed, measured (or scored) over at least ``min_steps`` steps, per non-plain setting."""
        found = {
            a.setting.label: (a.tokens_per_step, a.fed_tokens)
            for a in self._shadows.values()
            if a.observed >= min_steps
        }
        found.update(
            {
                a.setting.label: (a.tokens_per_step, a.fed_tokens)
                for a in self._arms
                if a.setting is not None and a.setting.window > 0 and a.observed >= min_steps
            }
        )
        return found

    def choose(self) -> LookaheadConfig | None:
        self._steps += 1
        if self._probe_left > 0 and self._probe is not None:
            self._probe_left -= 1
            return self._probe.setting
        if self._steps % self.probe_every == 0:
            rival = self._rival()
            if rival is not None:
                self._probe = rival
                self._probe_left = _probe_length(rival.setting) - 1
                return rival.setting
        return self._current.setting

    def observe(self, setting: LookaheadConfig | None, tokens: int, seconds: float, fed: int) -> None:
        arm = next((a for a in self._arms if a.setting == setting), None)
        if arm is None:  # a verification setting the verification arm has since left
            arm = self._verify
            assert arm is not None and setting is not None and setting.window == 0
        if setting is not None and setting.window == 0 and fed == 1:
            # Nothing to verify: the decoder ran a plain step. It times plain decoding, not verification;
            # counted for verification it would dilute a verification that loses (most steps of a chat
            # find no candidate) to within the switch margin, and Auto would keep it for good.
            arm = self._plain
        # Step times are reliable from the first step; acceptance varies a lot from step to step, so
        # the prediction counts as PRIOR_STEPS observed steps before the answers' own take over.
        arm.streak = arm.streak + 1 if arm is self._last else 1
        # a step time from long ago tells less of this machine now (its speed swings): the first step
        # after a long pause moves the estimate halfway
        weight = max(self.smoothing, 1.0 / (arm.observed + 2))
        if self._steps - arm.last_step > self.probe_every:
            weight = max(weight, 0.5)
        arm.last_step = self._steps
        self._last = arm
        if arm is self._verify and self._shadows:  # what its steps cost beyond the curve's prediction
            self._learn_cost(fed, seconds)
            self._verify_extra += weight * (seconds - self._predicted(fed) - self._verify_extra)
        else:
            arm.seconds += weight * (seconds - arm.seconds)
        if arm.streak > _refill_steps(setting):
            if not (arm is self._verify and self._shadows):  # else its shadow's scores, from every step, say it
                weight = max(self.smoothing / 2, 1.0 / (arm.observed + PRIOR_STEPS))
                arm.tokens_per_step += weight * (tokens - arm.tokens_per_step)
                arm.fed_tokens += weight * (fed - arm.fed_tokens)
            arm.observed += 1
        self._cost_verification()
        self._switch_to_best()

    def _predicted(self, fed: float) -> float:
        """A step feeding ``fed`` tokens, from plain's measured step and what such steps cost relative to it."""
        return self._plain.seconds * self._relative(fed)

    def _learn_cost(self, fed: int, seconds: float) -> None:
        """What a verification step of ``fed`` tokens cost over a plain step, as measured now: plain's step
        time is fresh while verification runs (the steps with nothing to verify are plain steps), and a ratio
        of two times taken together holds when the machine's speed swings, where two separate averages would
        not (one of them goes stale while the other setting runs)."""
        if fed <= 1:
            return
        ratio = seconds / self._plain.seconds
        cost, steps = self._learned_cost.get(fed, (ratio, 0))
        cost += max(1.0 / COST_STEPS, 1.0 / (steps + 1)) * (ratio - cost)
        self._learned_cost[fed] = (cost, steps + 1)

    def _relative(self, fed: float) -> float:
        """What a step feeding ``fed`` tokens costs over a plain step: as this chooser's own verification steps
        of that size measured (over about COST_STEPS of them, once LEARNED_FROM ran), else as calibrated. The
        calibration's curve is one quick measurement at start-up, a machine's costs swing between starts and
        with what else runs, and settings compared on a curve that came out flat by chance feed too much.
        Between sizes, linear (a fractional ``fed`` is an average)."""
        low = max(1, int(fed))
        costs = []
        for size in (low, low + 1):
            learned = self._learned_cost.get(size)
            if size == 1:
                costs.append(1.0)
            elif learned is not None and learned[1] >= LEARNED_FROM:
                costs.append(max(1.0, learned[0]))
            else:
                costs.append(self.calibration.curve.relative(size))
        costs[1] = max(costs)  # feeding more never costs less
        return costs[0] + (costs[1] - costs[0]) * (max(fed, 1.0) - low)

    def _cost_verification(self) -> None:
        """The verification arm's step time: the cost of the tokens its setting feeds (:meth:`_relative`), plus
        what its steps measured beyond that (their bookkeeping, the rows they return). The setting changes with
        the shadow scores; this extra carries over to the new one, a ratio would not."""
        if self._verify is not None and self._shadows:
            self._verify.seconds = self._predicted(self._verify.fed_tokens) + self._verify_extra

    def _rate(self, arm: _Arm) -> float:
        """Tokens per second an arm is expected to run at. The verification arm's is the lower of its rate over the
        last dozen verifying steps and its setting's over about :data:`STEADY_STEPS`: where verifying does not pay
        on the whole (one-token guesses that seldom hold), a short run of lucky steps does not make it run."""
        rate = arm.tokens_per_step / arm.seconds
        steady = self._shadows.get(arm.setting) if arm is self._verify and arm.setting is not None else None
        if steady is not None:
            rate = min(rate, steady.steady_tokens / (self._plain.seconds * steady.steady_cost + self._verify_extra))
        return rate

    def _switch_to_best(self) -> None:
        best = max(self._arms, key=self._rate)
        if best is not self._current and self._rate(best) > self.switch_margin * self._rate(self._current):
            self._current = best
            self._probe_left = 0

    def _rival(self) -> _Arm | None:
        """The setting to probe: plain where it has not run for two probe periods, else the best-rated one
        other than the current if it could plausibly win, else one not run for a long time."""
        others = [a for a in self._arms if a is not self._current]
        if not others:
            return None
        # Plain decoding, the baseline, is measured every other probe whatever it scored: a step time
        # taken while the machine was slow (a processor's speed can swing 2x within a minute) would
        # otherwise stand for hundreds of steps against the running setting's fresh ones.
        plain = next((a for a in others if a.setting is None), None)
        if plain is not None and self._steps - plain.last_step >= 2 * self.probe_every:
            return plain
        rival = max(others, key=self._rate)
        if self._rate(rival) >= KEEP_RATIO * self._rate(self._current):
            return rival
        # What measured slower once may win on other text (code after chat): each gets another look now and then.
        stale = min(others, key=lambda a: a.last_step)
        return stale if self._steps - stale.last_step >= REPROBE_AFTER else None


def _steady_rate(shadow: _Shadow) -> float:
    """Tokens per plain step's time on the steps it verifies, over about :data:`STEADY_STEPS` of them."""
    return shadow.steady_tokens / shadow.steady_cost


def _label(setting: LookaheadConfig | None) -> str:
    return setting.label if setting is not None else "plain"


def _refill_steps(setting: LookaheadConfig | None) -> int:
    """Steps a setting runs on a stale Jacobi window after it resumes: N-1 for a windowed one."""
    return setting.ngram - 1 if setting is not None and setting.window else 0


def _probe_length(setting: LookaheadConfig | None) -> int:
    """A probe measures a few steps, after any refill of the window."""
    return _refill_steps(setting) + (PROBE_STEPS if setting is not None else 1)


def auto_lookahead(model: Any) -> AutoChooser:
    """Auto for a transformers model, to pass to ``model.generate(..., custom_generate=lookahead_generate,
    lookahead=auto_lookahead(model))``: the step cost curve measured where ``model`` runs (about a second
    per dtype on a CPU for a small model), then every step chosen from it and from what it measures. Keep it
    and pass it to every call: it keeps learning. Measure again (a new one) after converting the model."""
    return AutoChooser(calibrate(model))
