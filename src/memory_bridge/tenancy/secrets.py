"""Token secrets: generated random, stored only as a digest, shown once.

Secrets carry 256 bits of randomness, so a fast SHA-256 digest is as safe to store as a slow
password hash and costs microseconds on every request.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Iterable
from typing import Any

SERVICE_PREFIX = "mb-"
ADMIN_PREFIX = "mb-admin-"
_SECRET_KEY = re.compile(r"(key|secret|password|passwd|authorization)$|^token$", re.IGNORECASE)


def is_secret_key(name: object) -> bool:
    """Whether a config key names a secret (`*key`, `*secret`, `*password`, `token`, ...)."""
    return _SECRET_KEY.search(str(name)) is not None


def new_secret(prefix: str = SERVICE_PREFIX) -> str:
    return prefix + secrets.token_urlsafe(32)


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def digests_match(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode(), b.encode())


def mask(value: str) -> str:
    """`sk-...abcd` for long secrets; short ones reveal nothing."""
    if len(value) >= 16:
        return f"{value[:3]}...{value[-4:]}"
    return "***"


def mask_secrets(data: Any) -> Any:
    """A copy of a JSON value with every secret-looking key's value masked, at any depth."""
    if isinstance(data, dict):
        out: dict[str, Any] = {}
        for key, value in data.items():
            if _SECRET_KEY.search(str(key)) and value is not None:
                out[key] = mask(value) if isinstance(value, str) else "***"
            else:
                out[key] = mask_secrets(value)
        return out
    if isinstance(data, list):
        return [mask_secrets(v) for v in data]
    return data


def secret_values(data: Any) -> list[str]:
    """Every secret string in a JSON value, so callers can keep them out of messages."""
    found: list[str] = []
    if isinstance(data, dict):
        for key, value in data.items():
            if _SECRET_KEY.search(str(key)) and isinstance(value, str):
                found.append(value)
            else:
                found.extend(secret_values(value))
    elif isinstance(data, list):
        for v in data:
            found.extend(secret_values(v))
    return found


def scrub(error: object, secrets: Iterable[str]) -> str:
    """An error's text with every known secret replaced, bounded in length."""
    text = str(error)
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return text[:300]
