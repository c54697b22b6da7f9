"""A remote OpenAI-compatible engine as a model source: the client (streaming, model listing), its
one-line errors, and the API key in the system's credential store."""

from core.remote.client import StreamEvent, list_models, stream_chat
from core.remote.errors import RemoteError
from core.remote.keys import KeyStoreError, resolve_key, store_key
from core.remote.stream import RemoteStream
from core.remote.target import RemoteSource, RemoteTarget, RemoteTimeouts, base_url

__all__ = [
    "KeyStoreError",
    "RemoteError",
    "RemoteSource",
    "RemoteStream",
    "RemoteTarget",
    "RemoteTimeouts",
    "StreamEvent",
    "base_url",
    "list_models",
    "resolve_key",
    "store_key",
    "stream_chat",
]
