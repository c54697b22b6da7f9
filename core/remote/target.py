"""Where a remote engine is: its base URL, the model, how long to wait; the key only where a request needs it."""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import urlsplit

from core.remote.errors import RemoteError

KEY_ENV_CHARACTERS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")


def base_url(text: str) -> str:
    """``text`` as the API's base URL (``http://host:port/v1``, no final slash); RemoteError when it is not one.

    A URL without a path gets ``/v1``: vLLM, llama.cpp's server, Ollama and ``serve`` all serve the API there.
    """
    url = text.strip().rstrip("/")
    try:
        parts = urlsplit(url)
        port_ok = parts.port is None or parts.port > 0
    except ValueError:
        port_ok = False
    if parts.scheme not in ("http", "https") or not parts.hostname or not port_ok or parts.query or parts.fragment:
        raise RemoteError(f"{text.strip()!r} is not a server address: give its base URL, like http://gpu-box:8000/v1.")
    return url if parts.path else url + "/v1"


def check_key_env(name: str) -> None:
    """RemoteError unless ``name`` is empty or can name an environment variable."""
    if name and not set(name) <= KEY_ENV_CHARACTERS:
        raise RemoteError(f"{name!r} is not an environment variable name: use letters, digits and _.")


def host_of(url: str) -> str:
    """``host:port`` of a base URL, as messages name the server."""
    return urlsplit(url).netloc.rpartition("@")[2]


@dataclass(frozen=True)
class RemoteTimeouts:
    """Seconds to wait: for the connection, and for each chunk (the first one waits for the server's prompt too)."""

    connect: float = 10.0
    chunk: float = 120.0


@dataclass(frozen=True)
class RemoteSource:
    """A remote model as settings name it: URL, model id, and the environment variable holding the key
    (empty: the key is in the credential store, or there is none). Never the key itself."""

    url: str
    model: str
    key_env: str = ""
    timeouts: RemoteTimeouts = field(default_factory=RemoteTimeouts)

    def __post_init__(self) -> None:
        object.__setattr__(self, "url", base_url(self.url))
        if not self.model.strip():
            raise RemoteError("No remote model is chosen: pick one of the server's models (Settings, Model).")
        check_key_env(self.key_env)

    @property
    def host(self) -> str:
        return host_of(self.url)


@dataclass(frozen=True)
class RemoteTarget:
    """What one request needs: the base URL, the key (kept out of ``repr``, so out of logs) and the timeouts."""

    url: str
    api_key: str = field(default="", repr=False)
    timeouts: RemoteTimeouts = field(default_factory=RemoteTimeouts)

    @property
    def host(self) -> str:
        return host_of(self.url)

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def scrub(self, text: str) -> str:
        """``text`` (a server's own words) with the key blanked out, should the server echo it."""
        return text.replace(self.api_key, "***") if self.api_key else text
