"""Provider keys in token configs, encrypted at rest with Fernet (`cryptography`).

Every secret in a stored config — `llm_api_key`, `memory_llm_api_key`, `embed_api_key`, the
Gateway `userKey`, a key inside a `*_body`: whatever `is_secret_key` recognises, at any depth —
is stored as `fernet:<token>`; the rest stays readable JSON. The key lives outside the
database (`MEMORY_BRIDGE_SECRET_KEY`, else a 0600 key file), so a copied database file holds
no usable provider key.

A key source holds one or more Fernet keys: one per line in the key file, separated by commas
or whitespace in the environment variable. The first encrypts; every one decrypts
(`MultiFernet`). That is all rotation needs: a new key goes first, every row is re-encrypted
with it, then the old keys are dropped (`memory-bridge rotate-secret-key`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from cryptography.fernet import Fernet, InvalidToken, MultiFernet

from memory_bridge.tenancy.private_files import PRIVATE_FILE, tighten, write_private
from memory_bridge.tenancy.secrets import is_secret_key

__all__ = [
    "ENV_NAME",
    "SEALED_PREFIX",
    "SecretCipher",
    "SecretKeyError",
    "UndecryptableSecret",
    "add_new_key",
    "load_cipher",
    "read_key_file",
    "retire_old_keys",
]

log = logging.getLogger(__name__)

ENV_NAME = "MEMORY_BRIDGE_SECRET_KEY"
SEALED_PREFIX = "fernet:"
GENERATE_HINT = (
    "python -c 'from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())'"
)


class SecretKeyError(RuntimeError):
    """No usable key. The message is for the operator and never contains key material."""


class UndecryptableSecret(ValueError):
    """A stored secret that none of the keys decrypts: a wrong key, or a damaged value."""


class SecretCipher:
    """Seals and opens the secrets of a config (a JSON value); never logs or shows one."""

    def __init__(self, keys: Sequence[bytes]) -> None:
        if not keys:
            raise SecretKeyError("no secret key was given")
        self._fernet = MultiFernet([Fernet(key) for key in keys])
        self.key_count = len(keys)

    def __repr__(self) -> str:
        return f"SecretCipher(<{self.key_count} key(s)>)"

    @classmethod
    def ephemeral(cls) -> SecretCipher:
        """A key that lives as long as this object: for stores nobody restarts (tests)."""
        return cls([Fernet.generate_key()])

    def seal(self, data: Any) -> Any:
        """A copy of `data` with every secret string encrypted with the first key."""
        return _map_secrets(data, self._encrypt)

    def seal_clear(self, data: Any) -> Any:
        """A copy with the secrets still in clear (rows from older versions) encrypted."""
        return _map_secrets(data, lambda v: v if is_sealed(v) else self._encrypt(v))

    def open(self, data: Any) -> Any:
        """A copy with every sealed secret decrypted; raises `UndecryptableSecret`."""
        return _map_secrets(data, self._decrypt)

    def reseal(self, data: Any) -> Any:
        """A copy with every secret (sealed under any key, or clear) sealed by the first key."""
        return _map_secrets(data, lambda v: self._encrypt(self._decrypt(v)))

    def _encrypt(self, value: str) -> str:
        return SEALED_PREFIX + self._fernet.encrypt(value.encode("utf-8")).decode("ascii")

    def _decrypt(self, value: str) -> str:
        if not is_sealed(value):
            return value  # written before encryption; sealed at the next start or init
        try:
            plain = self._fernet.decrypt(value.removeprefix(SEALED_PREFIX).encode("utf-8"))
            return plain.decode("utf-8")
        except (InvalidToken, UnicodeDecodeError):
            raise UndecryptableSecret("cannot be decrypted with the current secret key") from None


def is_sealed(value: str) -> bool:
    return value.startswith(SEALED_PREFIX)


def _map_secrets(data: Any, fn: Callable[[str], str]) -> Any:
    """`data` with `fn` applied to each secret string, by the rules of `secret_values`."""
    if isinstance(data, dict):
        return {
            key: fn(value)
            if is_secret_key(key) and isinstance(value, str)
            else _map_secrets(value, fn)
            for key, value in data.items()
        }
    if isinstance(data, list):
        return [_map_secrets(item, fn) for item in data]
    return data


# -- where the keys come from ----------------------------------------------------------------


def parse_keys(text: str, source: str) -> list[bytes]:
    """Fernet keys from `text` (lines, commas or spaces; `#` starts a comment line)."""
    lines = (line for line in text.splitlines() if not line.lstrip().startswith("#"))
    items = [item for line in lines for item in re.split(r"[\s,]+", line) if item]
    keys: list[bytes] = []
    for number, item in enumerate(items, start=1):
        key = item.encode("ascii", "replace")
        try:
            Fernet(key)
        except ValueError:
            # Which entry, never its text: it may be a real key with a typo in it.
            raise SecretKeyError(
                f"{source}: key {number} is not a Fernet key (32 url-safe base64-encoded "
                f"bytes); generate one with: {GENERATE_HINT}"
            ) from None
        keys.append(key)
    if not keys:
        raise SecretKeyError(f"{source} holds no key")
    return keys


def read_key_file(path: Path) -> list[bytes]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SecretKeyError(f"cannot read the secret key file {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise SecretKeyError(f"the secret key file {path} is not text") from None
    return parse_keys(text, f"secret key file {path}")


def load_cipher(env_value: str, key_file: Path) -> SecretCipher:
    """The keys of `MEMORY_BRIDGE_SECRET_KEY` if set, else the key file's (made if missing)."""
    if env_value.strip():
        return SecretCipher(parse_keys(env_value, ENV_NAME))
    if key_file.exists():
        tighten(key_file)
        return SecretCipher(read_key_file(key_file))
    return SecretCipher(_create_key_file(key_file))


def _create_key_file(path: Path) -> list[bytes]:
    """A new one-key file; if another process made one meanwhile, that one is used."""
    key = Fernet.generate_key()
    staged = path.with_name(f".{path.name}.new")
    write_private(staged, key.decode("ascii") + "\n")
    try:
        os.link(staged, path)  # unlike a rename, never replaces a key someone else wrote
    except FileExistsError:
        return read_key_file(path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            staged.unlink()
    log.warning(
        "created the secret key file %s (mode %o): back it up with the database; without it "
        "the provider keys stored in token configs cannot be read",
        path,
        PRIVATE_FILE,
    )
    return [key]


def add_new_key(path: Path) -> SecretCipher:
    """Put a new key first in the key file, keeping the old ones after it (they decrypt)."""
    keys = [Fernet.generate_key(), *read_key_file(path)]
    write_private(path, _key_file_text(keys))
    return SecretCipher(keys)


def retire_old_keys(path: Path) -> None:
    """Keep only the key file's first key, once nothing is encrypted with the others."""
    write_private(path, _key_file_text(read_key_file(path)[:1]))


def _key_file_text(keys: Sequence[bytes]) -> str:
    return "".join(key.decode("ascii") + "\n" for key in keys)
