"""Which lookahead parameters to use: the user's fixed W, N, G, or 'Auto'."""

from __future__ import annotations

from core.lookahead.config import LookaheadConfig
from core.lookahead.defaults import default_lookahead
from core.models.loader import LoadedModel
from core.paths import AppPaths
from core.settings import LookaheadSettings


def lookahead_for(settings: LookaheadSettings, loaded: LoadedModel, paths: AppPaths) -> LookaheadConfig:
    """Fixed settings as given; 'Auto' uses the measured defaults for the device and model size."""
    if not settings.auto:
        return settings.fixed
    return default_lookahead(loaded.device, loaded.parameters)
