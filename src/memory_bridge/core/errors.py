"""Errors of our own, rendered at the edge in the OpenAI error shape."""

from __future__ import annotations


class ProxyError(Exception):
    """An error MemoryBridge itself answers with; `type` is the OpenAI-style error type.

    `headers` go with the answer (`Retry-After` where asking again can help,
    `x-should-retry: false` where it cannot: OpenAI SDKs honour both).
    """

    def __init__(
        self,
        status: int,
        type_: str,
        message: str,
        headers: tuple[tuple[str, str], ...] = (),
    ) -> None:
        super().__init__(message)
        self.status = status
        self.type = type_
        self.message = message
        self.headers = headers


def invalid_request(message: str, status: int = 422) -> ProxyError:
    return ProxyError(status, "invalid_request_error", message)
