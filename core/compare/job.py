"""The compare page's model-thread jobs: one prompt plain and with lookahead, the local model beside a remote
source, the built-in suites. Each is a :class:`~core.engine.jobs.StepsJob` queued behind (never beside) the
chat's answers, with the chat's lookahead setting and sampling, so the speed-up shown is the chat's."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from core.compare.remote_run import LocalRemoteRun
from core.compare.run import CompareRequest, ComparisonRun, RunStep
from core.compare.suites import run_suites
from core.engine.jobs import JobListener, StepsJob
from core.engine.plan import decoding_plan
from core.engine.ready import ReadyModel
from core.lookahead import LookaheadConfig
from core.progress import CancelToken
from core.settings import Settings

Began = Callable[[ComparisonRun | LocalRemoteRun | None], None]
"""Called on the model thread as a job begins, with the run it iterates (a suite run: ``None``)."""


def comparison_job(
    prompt: str,
    settings: Settings,
    max_new_tokens: int,
    repeats: int,
    conversation_id: str | None,
    listener: JobListener[object],
    cancel: CancelToken,
    began: Began,
) -> StepsJob:
    """``prompt`` answered plain and with the settings' lookahead, ``repeats`` times each, order alternating;
    both modes warmed up the first time a model compares."""

    def build(ready: ReadyModel) -> ComparisonRun:
        request = CompareRequest(
            prompt,
            settings.system_prompt,
            _lookahead(ready, settings),
            max_new_tokens,
            repeats,
            conversation_id,
            settings.sampling,
        )
        run = ComparisonRun(ready.loaded, request, cancel, warm_up=not ready.compare_warmed)
        ready.compare_warmed = True
        began(run)
        return run

    return StepsJob(build, listener, cancel, "The comparison", urgent=_not_a_step)


def remote_comparison_job(
    prompt: str,
    settings: Settings,
    max_new_tokens: int,
    listener: JobListener[object],
    cancel: CancelToken,
    began: Began,
) -> StepsJob:
    """``prompt`` answered by the local model, then by the remote source the settings name."""
    remote = settings.remote.source()
    if remote is None:
        raise ValueError("No remote source is on: set one in Settings, Model, Remote.")

    def build(ready: ReadyModel) -> LocalRemoteRun:
        run = LocalRemoteRun(ready, remote, settings, prompt, max_new_tokens, cancel)
        began(run)
        return run

    return StepsJob(build, listener, cancel, "The comparison", urgent=_not_a_step)


def suites_job(
    settings: Settings,
    max_new_tokens: int,
    limit: int,
    progress: Callable[[str, float], None],
    listener: JobListener[object],
    cancel: CancelToken,
    began: Began,
) -> StepsJob:
    """The built-in suites (the first ``limit`` prompts of each), plain loop against the settings' lookahead:
    one yield, the table's rows."""

    def build(ready: ReadyModel) -> Iterator[list]:
        began(None)
        yield run_suites(
            ready.loaded, _lookahead(ready, settings), max_new_tokens, limit=limit, progress=progress, cancel=cancel
        )

    return StepsJob(build, listener, cancel, "The suite run", urgent=lambda _rows: True)


def _lookahead(ready: ReadyModel, settings: Settings) -> LookaheadConfig:
    config = decoding_plan("lookahead", settings.lookahead, ready.loaded, ready.auto).lookahead
    assert config is not None  # lookahead mode always has a setting
    return config


def _not_a_step(event: object) -> bool:
    """Run started or finished: shown at once, not held for the throttle."""
    return not isinstance(event, RunStep)
