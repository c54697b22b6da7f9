"""Model sources, loading options and the loader."""

from core.models.errors import (
    CorruptModelError,
    DeviceUnavailableError,
    LoadCancelledError,
    ModelError,
    ModelNotFoundError,
    ModelOutOfMemoryError,
    OfflineError,
    QuantizationUnavailableError,
    TokenizerMissingError,
    UnsupportedArchitectureError,
)
from core.models.loader import LoadedModel, load_model
from core.models.options import LoadOptions, ModelSource

__all__ = [
    "CorruptModelError",
    "DeviceUnavailableError",
    "LoadCancelledError",
    "LoadOptions",
    "LoadedModel",
    "ModelError",
    "ModelNotFoundError",
    "ModelOutOfMemoryError",
    "ModelSource",
    "OfflineError",
    "QuantizationUnavailableError",
    "TokenizerMissingError",
    "UnsupportedArchitectureError",
    "load_model",
]
