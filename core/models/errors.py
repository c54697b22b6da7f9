"""Typed model errors: each says what happened and what the user can do about it."""

from __future__ import annotations


class ModelError(Exception):
    """Base of all model errors. ``str(err)`` is a complete message for the user."""

    def __init__(self, what: str, todo: str) -> None:
        super().__init__(f"{what} {todo}")
        self.what = what
        self.todo = todo


class ModelNotFoundError(ModelError):
    """The file or folder does not exist, or holds no model."""


class CorruptModelError(ModelError):
    """A weights file is truncated or unreadable, or a checksum does not match."""


class UnsupportedArchitectureError(ModelError):
    """The model is not a decoder-only causal language model this app can run."""


class TokenizerMissingError(ModelError):
    """The model has no tokenizer files."""


class DeviceUnavailableError(ModelError):
    """The requested device (CUDA) is not there."""


class QuantizationUnavailableError(ModelError):
    """bitsandbytes cannot run the requested quantization on this device."""


class ModelOutOfMemoryError(ModelError):
    """The model did not fit in the device's memory."""


class OfflineError(ModelError):
    """A download was asked for but the model hub cannot be reached."""


class LoadCancelledError(ModelError):
    """The user cancelled a load or a download."""

    def __init__(self) -> None:
        super().__init__("Loading was cancelled.", "Choose a model to load it again.")
