"""The current request id, visible to every log record emitted while serving it."""

from __future__ import annotations

import secrets
from contextvars import ContextVar

request_id_var: ContextVar[str] = ContextVar("request_id", default="-")


def new_request_id() -> str:
    return secrets.token_hex(4)
