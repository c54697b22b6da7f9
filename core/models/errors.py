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


class DiskFullError(ModelError):
    """The disk has no room for a download: found before it starts, or when a write fails (ENOSPC)."""


class FetchInProgressError(ModelError):
    """Another fetch of the same model runs (the window's, or a second ``lookahead-chat fetch``)."""


class FetchCancelledError(LoadCancelledError):
    """The user cancelled a model fetch; the parts fetched so far are kept for the next one."""

    def __init__(self, name: str = "the model") -> None:
        ModelError.__init__(
            self, f"The fetch of {name} was cancelled.", "The parts fetched so far are kept: fetch it again to go on."
        )
