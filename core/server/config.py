"""Where the server listens and what it allows: the runtime form of the Server settings."""

from __future__ import annotations

from dataclasses import dataclass

from core.settings import ServerSettings

LOOPBACK = "127.0.0.1"
ALL_INTERFACES = "0.0.0.0"
MAX_BODY_BYTES = 1 << 20  # 1 MiB: far more than any prompt a small local model can take
MAX_PENDING = 64  # requests queued or running at once; more get a 429


@dataclass(frozen=True)
class ServerConfig:
    """``port`` 0 asks the system for a free port (tests); ``api_key`` empty means no key is asked."""

    host: str = LOOPBACK
    port: int = 8765
    api_key: str = ""
    max_tokens: int = 4096
    max_body_bytes: int = MAX_BODY_BYTES
    max_pending: int = MAX_PENDING

    @classmethod
    def from_settings(cls, settings: ServerSettings) -> ServerConfig:
        host = ALL_INTERFACES if settings.allow_network else LOOPBACK
        return cls(host, settings.port, settings.api_key, settings.max_tokens)
