"""Where the server listens and what it allows: the runtime form of the Server settings."""

from __future__ import annotations

from dataclasses import dataclass

from core.settings import ServerSettings

LOOPBACK = "127.0.0.1"
ALL_INTERFACES = "0.0.0.0"
MAX_BODY_BYTES = 1 << 20  # 1 MiB: far more than any prompt a small local model can take
MAX_PENDING = 64  # requests queued or running at once; more get a 429
MAX_CONNECTIONS = 128  # open at once; well under a desktop's usual 1024 file descriptors
HEADER_TIMEOUT_S = 10.0  # from opening (or the last answer) to a request's whole head; else closed
BODY_TIMEOUT_S = 30.0  # for a whole body (at most MAX_BODY_BYTES); else a 408


@dataclass(frozen=True)
class ServerConfig:
    """``port`` 0 asks the system for a free port (tests); ``api_key`` empty means no key is asked.

    ``allowed_hosts`` and ``allowed_origins`` are in the normal form :class:`ServerSettings` gives them.
    """

    host: str = LOOPBACK
    port: int = 8765
    api_key: str = ""
    max_tokens: int = 4096
    max_body_bytes: int = MAX_BODY_BYTES
    max_pending: int = MAX_PENDING
    allowed_hosts: tuple[str, ...] = ()
    allowed_origins: tuple[str, ...] = ()
    max_connections: int = MAX_CONNECTIONS
    header_timeout_s: float = HEADER_TIMEOUT_S
    body_timeout_s: float = BODY_TIMEOUT_S

    @classmethod
    def from_settings(cls, settings: ServerSettings) -> ServerConfig:
        host = ALL_INTERFACES if settings.allow_network else LOOPBACK
        return cls(
            host,
            settings.port,
            settings.api_key,
            settings.max_tokens,
            allowed_hosts=settings.allowed_hosts,
            allowed_origins=settings.allowed_origins,
        )
