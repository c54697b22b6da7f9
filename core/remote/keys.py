"""The remote engine's API key: in the system's credential store (``keyring``), or in an environment
variable the settings name; never in a file of ours."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

import keyring
import keyring.errors

from core.remote.errors import RemoteError

log = logging.getLogger(__name__)

SERVICE = "lookahead-chat"
"""The credential store's service name; the account is the server's base URL."""


class KeyStoreError(RemoteError):
    """The credential store cannot keep the key (none on this computer, locked, refused)."""


def _no_store(err: Exception) -> KeyStoreError:
    reason = " ".join(str(err).split())[:100] or type(err).__name__
    return KeyStoreError(
        f"This computer's credential store cannot keep the API key ({reason}). Put the key in an environment "
        "variable and name it in Settings, Model, 'Key from variable' (on the command line: --api-key-env NAME)."
    )


def store_key(url: str, key: str) -> None:
    """Keep ``key`` for the server at ``url`` (an empty key forgets it); KeyStoreError when the store fails.
    Slow where the store asks the desktop (D-Bus): call it off the GUI thread."""
    try:
        if key:
            keyring.set_password(SERVICE, url, key)
        elif keyring.get_password(SERVICE, url) is not None:
            keyring.delete_password(SERVICE, url)
    except keyring.errors.KeyringError as err:
        raise _no_store(err) from None


def resolve_key(url: str, key_env: str = "", env: Mapping[str, str] | None = None) -> str:
    """The key for the server at ``url``: the variable ``key_env`` names, else the credential store's ("" for none).

    A named variable that is not set is an error (the user asked for it); a store that cannot be read
    means no key (most local servers need none; one that does answers 401, whose message says what to do).
    """
    env = os.environ if env is None else env
    if key_env:
        value = env.get(key_env, "")
        if not value:
            raise RemoteError(
                f"The environment variable {key_env}, named for the remote server's API key, is not set: "
                f"set it (export {key_env}=...) and start again, or name another in Settings, Model."
            )
        return value
    try:
        return keyring.get_password(SERVICE, url) or ""
    except keyring.errors.KeyringError as err:
        log.info("no API key from the credential store: %s", type(err).__name__)
        return ""
